"""Shared by every stage: paths, orchestration configs, the error type, tools, files, provenance,
dry-run caps and mapping labels."""
