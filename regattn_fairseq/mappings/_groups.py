"""Group averaging: the Jacobian of prox_TV and prox_OSCAR (Niculae & Blondel 2017, Prop. 3).

Both proxes fuse coordinates into groups of equal value; their Jacobian averages a vector
within each group (block-diagonal, symmetric). The kernels label each position with its
group index within its row (-1 for positions outside every group: masked, or zeroed by the
OSCAR prox), which turns the product into one scatter and one gather over all rows at once.
"""
import torch


def group_mean(v: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """out[r, i] = mean of v[r, j] over j with group[r, j] == group[r, i]; 0 where group is -1."""
    rows, d = v.shape
    outside = group < 0
    slot = group + torch.arange(rows, device=v.device).unsqueeze(1) * d
    slot = slot.masked_fill(outside, rows * d).flatten()  # one spare slot collects the -1s
    sums = v.new_zeros(rows * d + 1).index_add_(0, slot, v.flatten())
    counts = torch.bincount(slot, minlength=rows * d + 1).to(v.dtype)
    return (sums / counts.clamp_min(1))[slot].view(rows, d).masked_fill_(outside, 0.0)
