"""Every result table's spec: the paper tables (configs/reproduce/) and the sweeps' table views."""

from __future__ import annotations

from omegaconf import OmegaConf

from regattn_fairseq.experiments.core.config import load_config
from regattn_fairseq.experiments.core.paths import CONFIG_DIR
from regattn_fairseq.experiments.data.test_sets import experiment_test_sets


def table_specs() -> dict:
    """Every result table's spec: the paper tables and the sweeps' table views.

    Returns
    -------
    dict
        table name -> spec.
    """

    specs = {}
    for path in sorted((CONFIG_DIR / "reproduce").glob("*.yaml")):
        specs[path.stem] = load_config("reproduce", path.stem)
    for path in sorted((CONFIG_DIR / "sweep").glob("*.yaml")):
        spec = table_spec(load_config("sweep", path.stem))
        specs[spec.table] = spec
    return specs


def table_spec(sweep) -> OmegaConf:
    """The sweep seen as a result table (rows keyed by mapping and swept value)."""
    evaluations = list(experiment_test_sets(sweep.experiment))
    return OmegaConf.create(
        {
            "table": f"sweep_{sweep.name}",
            "title": sweep.title,
            "paper_source": sweep.note,
            "generated_by": f"scripts/sweep.py {sweep.name}",
            "metrics": {e: [sweep.metric] for e in evaluations},
        }
    )
