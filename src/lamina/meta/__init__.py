"""The transactional catalog: engine setup, schema/migrations and catalog operations."""
