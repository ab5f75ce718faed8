"""Stage 5, rows: the result row's schema, its store (one reader, one writer, the lock), its keys
and how rows are built."""
