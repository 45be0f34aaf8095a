"""runwatch as a tool: the `runwatch` command (`runwatch.cli`) and its MCP server (`runwatch.mcp_server`).

The monitor itself lives in the `collector` and `app` packages; this package only puts a command in front
of them, so it may import both (nothing below imports it).
"""
