"""Orchestration only: reproduce a table, sweep, re-run a row, prepare data, score a file; each a
command line."""
