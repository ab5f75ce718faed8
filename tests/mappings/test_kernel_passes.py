"""The pass counter of the row kernels' table (regattn_bench.kernel_passes) on a kernel whose
counts are known by construction: elements read and written (masked lanes excluded),
reductions over a row axis (not over tl.sort-sized axes of 2), threshold-search steps and
bisections, per program and per launch; and the table it writes from the real kernels."""

import json
import os

os.environ.setdefault("TRITON_INTERPRET", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

triton = pytest.importorskip("triton", reason="triton is not installed (pip install triton)")
import triton.language as tl  # noqa: E402

from regattn.mappings import _kernels, _triton  # noqa: E402
from regattn_bench import kernel_passes  # noqa: E402

if not _kernels.triton_interpreting():
    pytest.skip("TRITON_INTERPRET is set to 0", allow_module_level=True)


@triton.jit
def _known(X, Y, d, STEPS: tl.constexpr, BLOCK: tl.constexpr):
    """Per program (row): reads d elements, writes d + 1; reduces twice over the row and once
    over pairs; STEPS search steps, of which the first bisects where the row sum is > 0."""
    row = tl.program_id(0)
    offs = tl.arange(0, BLOCK)
    inb = offs < d
    x = tl.load(X + row * d + offs, mask=inb, other=0.0)
    total = tl.sum(x, axis=0)
    top = tl.max(x, axis=0)
    pairs = tl.sum(tl.reshape(x, (BLOCK // 2, 2)), axis=1)  # an axis of 2: not a row pass
    for i in range(STEPS):
        _triton._search_step((i == 0) & (total > 0))
    tl.store(Y + row * d + offs, x - top + tl.sum(pairs, axis=0) * 0, mask=inb)
    tl.store(Y + row * d, total)


def test_counts_of_a_known_kernel():
    x = torch.tensor([[1.0, 2, 3, 4, 5, 6, 7, 8, 9, 10], [-1.0] * 10, [0.5] * 10])
    y = torch.empty_like(x)
    marker = _triton._search_step
    with kernel_passes.count_kernel_passes() as launches:
        _known[(3,)](x, y, 10, STEPS=5, BLOCK=16)
        _known[(1,)](x, y, 10, STEPS=2, BLOCK=16)
    assert [launch.kernel for launch in launches] == ["_known", "_known"]
    first, second = launches
    assert len(first.programs) == 3 and len(second.programs) == 1
    for p in first.programs:
        assert (p.reads, p.writes, p.reductions, p.steps) == (10, 11, 2, 5)
    # the sum and the max count; the sums over pairs (2 lanes) and over the 8 pair sums do not
    assert [p.bisections for p in first.programs] == [1, 0, 1]
    assert second.programs[0].steps == 2 and second.total("reads") == 10
    # the marker is restored: a launch outside the block is not counted
    _known[(1,)](x, y, 10, STEPS=1, BLOCK=16)
    assert len(launches) == 2 and _triton._search_step is marker


def test_summary_of_a_real_kernel_is_per_row_in_units_of_d():
    x = torch.randn(3, 20, dtype=torch.float64)
    runs = kernel_passes.count_mapping("sparsemax", {}, [(x, None)])
    table = kernel_passes.summarize(runs)
    assert list(table) == ["_sparsemax_fwd", "_support_bwd"]
    fwd, bwd = table["_sparsemax_fwd"], table["_support_bwd"]
    # the forward reads the row once (and a few scalars), writes it once (and its flag)
    assert 1 <= fwd["reads_per_row_d"]["median"] < 1.5
    assert 1 <= fwd["writes_per_row_d"]["worst"] < 1.5
    # the backward reads y and the cotangent and writes the product
    assert 2 <= bwd["reads_per_row_d"]["median"] < 2.5 and bwd["steps"]["worst"] == 0
    assert fwd["steps"]["worst"] >= 1 and fwd["reductions"]["worst"] > fwd["steps"]["worst"]


def test_table_shows_the_before_run_beside_the_latest(tmp_path, monkeypatch):
    x = torch.randn(2, 20, dtype=torch.float64)
    small = {
        "sparsemax": {
            "tests": kernel_passes.summarize(
                kernel_passes.count_mapping("sparsemax", {}, [(x, None)])
            )
        }
    }
    monkeypatch.setattr(kernel_passes, "measure", lambda: small)
    for label in ("before", "after", "again"):
        kernel_passes.main(["--label", label, "--out-dir", str(tmp_path)])
    table = (tmp_path / "row_kernel_passes.md").read_text()
    assert table.count("## before:") == 1 and table.count("## again:") == 1
    assert "## after:" not in table and "| sparsemax | tests | `_sparsemax_fwd` |" in table
    runs = json.loads((tmp_path / "row_kernel_passes.json").read_text())["runs"]
    assert [r["label"] for r in runs] == ["before", "after", "again"]
    assert all(r["env"]["git_commit"] and r["triton"] for r in runs)
