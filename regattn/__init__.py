"""regattn: sparse and structured attention mappings (Niculae & Blondel 2017 and family).

Pure torch plus compiled CPU row kernels; no fairseq. The submodules:

- `regattn.mappings`: softmax, sparsemax, sq-pnorm-max, fusedmax, oscarmax and alpha-entmax
  with exact Jacobians, the TV and OSCAR proxes, and the smoothed max max_Omega
  (`regattn.mappings.smoothed_max`);
- `regattn.attention`: fused flash-style attention with sparsemax, 1.5-entmax or alpha-entmax
  (alpha learned per head, with its gradient): Triton kernels on CUDA, no (queries x keys)
  matrix in memory, and the row-wise path of the mappings as its oracle and CPU fallback;
- `regattn.analysis`: sparsity and structure statistics of attention rows;
- `regattn.dp`: smoothed dynamic programming (Mensch & Blondel 2018): differentiable Viterbi
  and DTW with the entropy or squared-l2 regularizer, twice differentiable;
- `regattn.continuous`: continuous attention (Martins et al. 2020): a Gaussian (continuous
  softmax) or truncated-parabola (continuous sparsemax) density over the source, with the
  context E_p[V(t)] of a ridge-fitted value function in closed form.
- `regattn.integrations.transformers`: the mappings as attention backends of Hugging Face
  `transformers` (the `hf` extra; not imported here, so `regattn` needs no `transformers`).

The fairseq plugin that puts these mappings into models is the separate package
`regattn_fairseq` (`pip install .[fairseq]`).
"""

from . import analysis, attention, continuous, dp, mappings

__all__ = ["analysis", "attention", "continuous", "dp", "mappings"]
