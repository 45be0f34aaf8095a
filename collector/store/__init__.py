"""The only package with SQL: the DuckDB file, its schema, point writes, reads and alerts."""
