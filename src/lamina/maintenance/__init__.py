"""Maintenance: retention, orphan files, failed writes (and, later, compaction)."""
