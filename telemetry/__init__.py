"""Logs and traces of every process (worker, gateway, CLI): one format, one redaction (docs/observability.md)."""
