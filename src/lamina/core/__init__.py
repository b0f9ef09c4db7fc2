"""Pure domain code: no SQL, no files, no engines."""
