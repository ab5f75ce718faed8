"""The checkout that the reproduction suite and the benchmarks run from: its folders
(`paths`), what it is at (`provenance`: the git commit and whether the work tree differs from
it, the CPU), writing a result file into it all at once (`files`), and the error their
commands report to the user without a traceback (`errors.ReproError`).

Both `regattn_fairseq.experiments` and the benchmarks (`regattn_bench`,
`regattn_fairseq.benchmarks`) import it; it imports neither, nor `regattn`, torch or fairseq
(import-linter contracts in pyproject.toml), so that it holds no benchmark or suite code."""
