"""Reads what wandb wrote offline: a run's `.wandb` file is a LevelDB-style log (32 KiB blocks
of CRC-framed chunks, after a 7-byte `:W&B` header) of `wandb.proto` Record messages. wandb
0.31 ships no Python reader for it, and the tests must not go to the network."""

import json
import struct
from pathlib import Path

from wandb.proto import wandb_internal_pb2

_BLOCK = 32 * 1024
_HEADER = 7  # ":W&B" + magic (2 bytes) + version (1 byte)
_CHUNK_HEADER = 7  # crc32 (4) + length (2) + type (1)
_FULL, _FIRST, _MIDDLE, _LAST = 1, 2, 3, 4


def records(path: Path) -> list:
    """Every Record of an offline run file, in order."""
    data = Path(path).read_bytes()
    if data[:4] != b":W&B":
        raise ValueError(f"{path}: not a wandb run file (header {data[:7]!r})")
    found, chunks, position = [], [], _HEADER
    while position + _CHUNK_HEADER <= len(data):
        left = _BLOCK - position % _BLOCK
        if left < _CHUNK_HEADER:  # a block's tail too short for a chunk is padding
            position += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[position : position + _CHUNK_HEADER])
        if kind == 0:  # zero padding to the end of the block
            position += left
            continue
        start = position + _CHUNK_HEADER
        chunks.append(data[start : start + length])
        position = start + length
        if kind in (_FULL, _LAST):
            record = wandb_internal_pb2.Record()
            record.ParseFromString(b"".join(chunks))
            found.append(record)
            chunks = []
    return found


def offline_run(path: Path) -> dict:
    """An offline run file as a dict: id, name, group, project, config (the run's initial
    config and later updates), summary updates and history keys."""
    run = {"config": {}, "summary": {}, "history_keys": set()}
    for record in records(path):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            run.update(
                id=record.run.run_id,
                name=record.run.display_name,
                group=record.run.run_group,
                project=record.run.project,
            )
            run["config"].update(
                {u.key: json.loads(u.value_json) for u in record.run.config.update}
            )
        elif kind == "config":
            run["config"].update({u.key: json.loads(u.value_json) for u in record.config.update})
        elif kind == "summary":
            run["summary"].update(
                {u.key: json.loads(u.value_json) for u in record.summary.update if u.key}
            )
        elif kind == "history":
            run["history_keys"] |= {u.key or "/".join(u.nested_key) for u in record.history.item}
    return run


def offline_runs(run_dir: Path) -> list[dict]:
    """Every offline run under `run_dir/wandb`, oldest first. A run folder without a run file,
    which a second wandb.init in a process leaves even when it returns the active run, fails
    the test: each training is one run."""
    folders = sorted(Path(run_dir).glob("wandb/offline-run-*"))
    empty = [folder.name for folder in folders if not any(folder.glob("run-*.wandb"))]
    assert not empty, f"wandb run folders without a run in {run_dir}: {empty}"
    return [offline_run(path) for folder in folders for path in sorted(folder.glob("run-*.wandb"))]
