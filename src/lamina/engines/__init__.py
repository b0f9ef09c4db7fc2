"""Thin adapters that execute scan plans and writes on real engines (DuckDB, Spark)."""
