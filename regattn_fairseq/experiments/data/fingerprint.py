"""What data a model trained on, as one hash of its binarized files."""

from __future__ import annotations

from pathlib import Path

from regattn_fairseq.experiments.data.checksums import fingerprint, record


def data_fingerprint(bin_dir: Path) -> str:
    """The SHA-256 of the binarized data and dictionaries a model trains on.

    Parameters
    ----------
    bin_dir : Path
        the prepared data's fairseq folder.

    Returns
    -------
    str
        `checksums.fingerprint` of the files' checksums: hex SHA-256 over the sorted
        (path relative to `bin_dir`, SHA-256) of every ``*.bin``, ``*.idx``, ``*.label`` and
        ``dict*.txt`` file in it or its subfolders (SNLI keeps premise, hypothesis and labels
        in input0/, input1/ and label/). Result rows take the same value from the checksums
        recorded in the stamp, once the files are verified against them
        (`checksums.verify`).

    Raises
    ------
    ReproError
        the folder holds none of them.
    """
    return fingerprint(record(bin_dir))
