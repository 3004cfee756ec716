"""Operator operations that need Temporal as well as Postgres (the CLI is a thin shell over them)."""
