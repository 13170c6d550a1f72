"""Benchmarks: `python -m bench.<name>` prints a table (no timed assertions anywhere)."""
