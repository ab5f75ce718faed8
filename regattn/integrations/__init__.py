"""Adapters that put the regattn mappings into other libraries' models.

- `regattn.integrations.transformers`: attention backends for Hugging Face `transformers`
  (`pip install "regattn[hf]"`); importing `regattn` or this package never imports
  `transformers`, only importing that submodule does.
"""
