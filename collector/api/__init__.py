"""The HTTP API (FastAPI on 127.0.0.1), the views the CLI shares, and the client."""
