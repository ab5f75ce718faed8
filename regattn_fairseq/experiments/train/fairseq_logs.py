"""fairseq's JSON log lines (`--log-format json`, and fairseq-hydra-train's default log):
each record is a JSON object at the end of a line, after a logger prefix."""

from __future__ import annotations

import json
import re

_JSON_TAIL = re.compile(r"(\{.*\})\s*$")


def json_records(text: str) -> list[dict]:
    """Every JSON object that ends a line of a fairseq log, in order.

    Parameters
    ----------
    text : str
        the log (several lines).

    Returns
    -------
    list[dict]
        The parsed objects; lines whose brace-delimited tail is not JSON (a printed Python
        dict, say) are skipped.
    """
    records = []
    for line in text.splitlines():
        match = _JSON_TAIL.search(line)
        if match:
            try:
                record = json.loads(match.group(1))
            except json.JSONDecodeError:
                continue
            if isinstance(record, dict):
                records.append(record)
    return records


def last_record_with(text: str, key: str) -> dict | None:
    """The last JSON record of a fairseq log that has `key`.

    Parameters
    ----------
    text : str
        the log.
    key : str
        a statistic's name as fairseq logs it, e.g. ``"train_wps"`` or
        ``"test_accuracy"`` (JSON logs prefix the subset).

    Returns
    -------
    dict | None
        That record, or None when no record has the key.
    """
    found = None
    for record in json_records(text):
        if key in record:
            found = record
    return found
