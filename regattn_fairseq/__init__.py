"""regattn: sparse and structured attention (Niculae & Blondel 2017) as a fairseq user dir.

`regattn_fairseq.mappings` is plain torch and never imports fairseq. When fairseq loads this
package as a user dir (`--user-dir .../regattn_fairseq`), fairseq is already imported and we
import the submodules whose decorators register the models, tasks and criterions.
"""
import importlib
import importlib.util
import sys

if "fairseq" in sys.modules:
    for _sub in ("criterions", "models", "tasks"):
        if importlib.util.find_spec(f"{__name__}.{_sub}") is not None:
            importlib.import_module(f"{__name__}.{_sub}")
