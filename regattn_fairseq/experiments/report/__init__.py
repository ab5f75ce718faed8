"""Stage 6, report: the tables and figures regenerated from the rows."""
