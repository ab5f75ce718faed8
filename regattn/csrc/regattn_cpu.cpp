// CPU bindings: every op takes a (rows, d) contiguous tensor and an optional (rows, d) bool
// mask (an undefined/empty tensor means "all positions valid"), runs the row algorithm over
// the unmasked positions of each row in parallel over rows, and writes 0 (group -1) at
// masked positions.
#include <torch/extension.h>
#include <ATen/Parallel.h>

#include <atomic>
#include <cstdlib>
#include <string>
#include <vector>

#include "avx512_fused.h"
#include "avx512_oscar.h"
#include "avx512_pnorm.h"
#include "dp_sweeps.h"
#include "row_algorithms.h"

namespace regattn {
namespace {

void check_rows(const torch::Tensor& x, const torch::Tensor& mask) {
  TORCH_CHECK(x.dim() == 2 && x.is_contiguous(), "regattn kernels expect a contiguous (rows, d) tensor");
  TORCH_CHECK(x.device().is_cpu(), "regattn CPU kernel called with a ", x.device(), " tensor");
  if (mask.defined() && mask.numel() > 0) {
    TORCH_CHECK(mask.sizes() == x.sizes() && mask.is_contiguous() && mask.scalar_type() == torch::kBool,
                "mask must be a contiguous bool tensor of the same shape as the scores");
  }
}

// Grain so that a task holds at least ~16k values: small batches stay on one thread.
int64_t grain_for(int64_t d) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(d, 1)); }

// The errors of mappings/_rows.py (ValueErrors in Python), raised by the kernels, which check
// their inputs as they read them: a separate pass over the scores before the kernel costs a
// read of the whole tensor from memory.
template <typename T>
[[noreturn]] void raise_non_finite(const T* xp, const bool* mp, int64_t count) {
  bool nan = false;
  for (int64_t i = 0; i < count && !nan; ++i) nan = (!mp || mp[i]) && std::isnan(xp[i]);
  TORCH_CHECK_VALUE(false, "attention scores contain ", nan ? "NaN" : "infinite",
                    " values at unmasked positions; exclude positions with mask= instead of -inf scores");
  std::abort();  // not reached
}

[[noreturn]] void raise_spread_overflow() {
  TORCH_CHECK_VALUE(false, "attention scores of a row (divided by gamma) span more than the largest finite value "
                    "of their dtype (max - min overflows), so they cannot be shifted to a maximum of 0; rescale "
                    "the scores");
  std::abort();  // not reached
}

// The largest spread max - min of a row that a mapping with temperature gamma accepts: it
// computes on (x - max) / gamma, which must be finite. Written so that no product overflows
// (for gamma >= 1 the limit is the dtype's max: only an overflowed spread fails).
template <typename T>
T max_spread(double gamma) {
  return std::numeric_limits<T>::max() * static_cast<T>(std::min(gamma, 1.0));
}

// Runs fn(row, row_in, row_out, row_group, n, shift) on each row's unmasked values, gathered
// into per-thread scratch when the row is masked (so the algorithms see consecutive unmasked
// positions as neighbours), and scatters results back; shift is the max of those values.
// Group ids are int32: they index positions within a row. Raises ValueError (after the
// parallel loop) where an unmasked value is not finite or where a row's max - min exceeds
// `spread_limit` (max_spread for the mappings, which compute on (x - max) / gamma; infinity
// for the standalone proxes, which take no shift). The row algorithms never see such a row,
// nor one with no unmasked value (it gets zeros).
template <typename T, typename Fn>
void for_each_row(const torch::Tensor& x, const torch::Tensor& mask, torch::Tensor& out,
                  int32_t* group, T spread_limit, Fn fn) {
  const int64_t rows = x.size(0), d = x.size(1);
  const T* xp = x.data_ptr<T>();
  T* op = out.data_ptr<T>();
  const bool* mp = (mask.defined() && mask.numel() > 0) ? mask.data_ptr<bool>() : nullptr;
  std::atomic<bool> non_finite{false}, overflow{false};
  at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
    std::vector<T> in_buf(d), out_buf(d);
    std::vector<int32_t> group_buf(d);
    std::vector<int64_t> index(d);
    // false where the row must not reach fn
    auto checked = [&](const T* in, int64_t n, T& shift) {
      if (n == 0) return false;
      const RowRange<T> range = row_range(in, n);
      if (!range.finite) {
        non_finite = true;
        return false;
      }
      if (!(range.max - range.min <= spread_limit)) {
        overflow = true;
        return false;
      }
      shift = range.max;
      return true;
    };
    for (int64_t r = begin; r < end; ++r) {
      const T* xr = xp + r * d;
      T* orow = op + r * d;
      int32_t* grow = group ? group + r * d : group_buf.data();
      T shift = 0;
      if (!mp) {
        if (checked(xr, d, shift)) fn(r, xr, orow, grow, d, shift);
        continue;
      }
      const bool* mr = mp + r * d;
      int64_t n = 0;
      for (int64_t i = 0; i < d; ++i) {
        if (mr[i]) {
          index[n] = i;
          in_buf[n++] = xr[i];
        }
      }
      const bool run = checked(in_buf.data(), n, shift);
      if (run) fn(r, in_buf.data(), out_buf.data(), group_buf.data(), n, shift);
      for (int64_t i = 0; i < d; ++i) {
        orow[i] = T(0);
        if (group) grow[i] = -1;
      }
      for (int64_t j = 0; run && j < n; ++j) {
        orow[index[j]] = out_buf[j];
        if (group) grow[index[j]] = group_buf[j];
      }
    }
  });
  if (non_finite) raise_non_finite(xp, mp, rows * d);
  if (overflow) raise_spread_overflow();
}

// Per-thread scratch of n values, allocated once per thread rather than per row; kSlot tells
// apart the buffers that one row algorithm needs at the same time.
template <typename T, int kSlot = 0>
T* scratch(int64_t n) {
  thread_local std::vector<T> buf;
  if ((int64_t)buf.size() < n) buf.resize(n);
  return buf.data();
}

// Whether every value of x is finite and max(x) - min(x) <= limit, over the whole tensor: a
// sufficient test that no row holds a NaN or inf and that no row's spread exceeds `limit`,
// for the mappings that run torch ops rather than a kernel that checks its rows (softmax).
// One vectorised pass (row_range over fixed chunks, in parallel) with no temporary tensor:
// abs().sum(), the test it replaces, wrote a tensor of |x| and read it back, and cost a
// quarter to a half of the softmax it guarded. False asks the caller for the exact per-row
// check (which raises the errors).
bool range_within(torch::Tensor x, double limit) {
  TORCH_CHECK(x.is_contiguous() && x.device().is_cpu(), "range_within expects a contiguous CPU tensor");
  const int64_t n = x.numel();
  if (n == 0) return true;
  constexpr int64_t kChunk = 1 << 15;
  const int64_t chunks = (n + kChunk - 1) / kChunk;
  bool ok = true;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "range_within", [&] {
    const scalar_t* p = x.data_ptr<scalar_t>();
    std::vector<RowRange<scalar_t>> ranges(chunks);
    at::parallel_for(0, chunks, 1, [&](int64_t begin, int64_t end) {
      for (int64_t c = begin; c < end; ++c) ranges[c] = row_range(p + c * kChunk, std::min(kChunk, n - c * kChunk));
    });
    scalar_t hi = ranges[0].max, lo = ranges[0].min;
    for (const auto& r : ranges) {
      ok = ok && r.finite;
      hi = std::max(hi, r.max);
      lo = std::min(lo, r.min);
    }
    ok = ok && hi - lo <= static_cast<scalar_t>(limit);
  });
  return ok;
}

#ifdef REGATTN_HAVE_AVX2_POWERS
// Whether a kernel may take its AVX-512 chunk kernel (avx512_rows.h): float rows, no mask,
// and AVX-512 enabled.
bool unmasked_float_avx512(const torch::Tensor& x, const torch::Tensor& mask) {
  return x.scalar_type() == torch::kFloat && !(mask.defined() && mask.numel() > 0) &&
         avx512_enabled().load(std::memory_order_relaxed);
}

// Runs chunk(begin, end, non_finite, overflow) over chunks of x's rows in parallel (the
// chunk kernel flags the rows it skipped), then raises for_each_row's errors for those rows.
template <typename Chunk>
void for_each_chunk_avx512(const torch::Tensor& x, Chunk chunk) {
  std::atomic<bool> non_finite{false}, overflow{false};
  at::parallel_for(0, x.size(0), grain_for(x.size(1)), [&](int64_t begin, int64_t end) {
    bool chunk_non_finite = false, chunk_overflow = false;
    chunk(begin, end, chunk_non_finite, chunk_overflow);
    if (chunk_non_finite) non_finite = true;
    if (chunk_overflow) overflow = true;
  });
  if (non_finite) raise_non_finite(x.data_ptr<float>(), static_cast<const bool*>(nullptr), x.numel());
  if (overflow) raise_spread_overflow();
}

// for_each_chunk_avx512 of chunk_kernel(x, y, rows, d, 1 / gamma, max_spread, non_finite,
// overflow): the chunk kernels of the mappings with a temperature.
template <typename ChunkKernel>
void run_row_chunks_avx512(const torch::Tensor& x, torch::Tensor& y, double gamma, ChunkKernel chunk_kernel) {
  const int64_t d = x.size(1);
  const float* xp = x.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  for_each_chunk_avx512(x, [&](int64_t begin, int64_t end, bool& non_finite, bool& overflow) {
    chunk_kernel(xp + begin * d, yp + begin * d, end - begin, d, static_cast<float>(1.0 / gamma),
                 max_spread<float>(gamma), non_finite, overflow);
  });
}

// entmax_halley_rows_avx512 over x's rows, where it applies (unmasked float rows of up to
// kEntmaxRegisterD values, AVX-512 enabled): y, and weight where defined; false elsewhere.
bool entmax_rows_avx512(const torch::Tensor& x, const torch::Tensor& mask, const torch::Tensor& alpha,
                        torch::Tensor& y, torch::Tensor* weight) {
  const int64_t d = x.size(1);
  if (d > kEntmaxRegisterD || !unmasked_float_avx512(x, mask)) return false;
  const float *xp = x.data_ptr<float>(), *ap = alpha.data_ptr<float>();
  float *yp = y.data_ptr<float>(), *wp = weight ? weight->data_ptr<float>() : nullptr;
  for_each_chunk_avx512(x, [&](int64_t begin, int64_t end, bool& non_finite, bool& overflow) {
    entmax_halley_rows_avx512(xp + begin * d, yp + begin * d, wp ? wp + begin * d : nullptr, ap + begin,
                              end - begin, d, max_spread<float>(1.0), non_finite, overflow);
  });
  return true;
}
#endif

// softmax(x / gamma) of each row, checked as it is read (for_each_row): the check that
// torch.softmax needed as a separate pass over the scores comes with the row's max. Unmasked
// float rows on a CPU with AVX-512 take softmax_rows_avx512, which does the same in one call
// per chunk of rows.
torch::Tensor softmax_rows(torch::Tensor x, torch::Tensor mask, double gamma) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (unmasked_float_avx512(x, mask)) {
    run_row_chunks_avx512(x, y, gamma, softmax_rows_avx512);
    return y;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "softmax_rows", [&] {
    const scalar_t scale = static_cast<scalar_t>(1.0 / gamma);
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(gamma),
                           [scale](int64_t, const scalar_t* in, scalar_t* out, int32_t*, int64_t n, scalar_t shift) {
                             softmax_row(in, out, n, shift, scale);
                           });
  });
  return y;
}

// sparsemax, P_simplex(x / gamma), of each row (unmasked float rows of up to 64 values on a
// CPU with AVX-512: sparsemax_rows_avx512, in registers).
torch::Tensor sparsemax_rows(torch::Tensor x, torch::Tensor mask, double gamma) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (d <= kSparsemaxRegisterD && unmasked_float_avx512(x, mask)) {
    run_row_chunks_avx512(x, y, gamma, sparsemax_rows_avx512);
    return y;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sparsemax_rows", [&] {
    const scalar_t scale = static_cast<scalar_t>(1.0 / gamma);
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(gamma),
                           [d, scale](int64_t, const scalar_t* in, scalar_t* out, int32_t*, int64_t n, scalar_t shift) {
                             project_simplex_row(in, out, n, shift, scale, scratch<scalar_t>(d + kPad));
                           });
  });
  return y;
}

template <typename T>
TvScratch<T>& tv_scratch(int64_t n) {
  thread_local TvScratch<T> scratch;
  scratch.resize(n);
  return scratch;
}

torch::Tensor new_groups(const torch::Tensor& x) { return torch::empty(x.sizes(), x.options().dtype(torch::kInt)); }

std::vector<torch::Tensor> prox_tv1d_rows(torch::Tensor x, torch::Tensor mask, double lam) {
  check_rows(x, mask);
  auto z = torch::empty_like(x);
  auto group = new_groups(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "prox_tv1d_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam);
    for_each_row<scalar_t>(x, mask, z, group.data_ptr<int32_t>(), std::numeric_limits<scalar_t>::infinity(),
                           [l, d](int64_t, const scalar_t* in, scalar_t* out, int32_t* g, int64_t n, scalar_t) {
                             prox_tv1d_row(in, out, g, n, l, tv_scratch<scalar_t>(d));
                           });
  });
  return {z, group};
}

// fusedmax = P_simplex(prox_TV(x / gamma)) (Prop. 2) in one pass per row: the prox goes to
// per-thread scratch, not to a tensor that the projection would read back. The prox runs on
// v = (x - max) / gamma (it commutes with adding a constant, as does the projection), written
// to scratch first: its many reads of v would otherwise each redo the subtraction, and on
// x itself its arithmetic would be at the scores' magnitude, not their spread. Unmasked float
// rows on a CPU with AVX-512 take fusedmax_rows_avx512, which fuses these passes per chunk of
// rows and gives segment ids on the support only (-1 elsewhere; the backward reads no other).
std::vector<torch::Tensor> fusedmax_rows(torch::Tensor x, torch::Tensor mask, double gamma, double lam) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  auto group = new_groups(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (unmasked_float_avx512(x, mask)) {
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    int32_t* gp = group.data_ptr<int32_t>();
    for_each_chunk_avx512(x, [&](int64_t begin, int64_t end, bool& non_finite, bool& overflow) {
      fusedmax_rows_avx512(xp + begin * d, yp + begin * d, gp + begin * d, end - begin, d,
                           static_cast<float>(1.0 / gamma), static_cast<float>(lam), max_spread<float>(gamma),
                           non_finite, overflow);
    });
    return {y, group};
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "fusedmax_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam), scale = static_cast<scalar_t>(1.0 / gamma);
    for_each_row<scalar_t>(x, mask, y, group.data_ptr<int32_t>(), max_spread<scalar_t>(gamma),
                           [l, d, scale](int64_t, const scalar_t* in, scalar_t* out, int32_t* g, int64_t n,
                                         scalar_t shift) {
                             scalar_t* v = scratch<scalar_t, 2>(d);
                             for (int64_t i = 0; i < n; ++i) v[i] = (in[i] - shift) * scale;
                             scalar_t* z = scratch<scalar_t, 1>(d);
                             prox_tv1d_row(v, z, g, n, l, tv_scratch<scalar_t>(d));
                             project_simplex_row(z, out, n, row_max(z, n), scalar_t(1), scratch<scalar_t>(d + kPad));
                           });
  });
  return {y, group};
}

// Per-thread scratch of the sort + pool-adjacent-violators rows.
template <typename T>
struct PoolScratch {
  std::vector<T> a;
  std::vector<acc_t<T>> sum;
  std::vector<int32_t> order, block;
  std::vector<int64_t> start;

  static PoolScratch& for_thread(int64_t d) {
    thread_local PoolScratch scratch;
    if ((int64_t)scratch.a.size() < d) {
      scratch.a.resize(d);
      scratch.sum.resize(d);
      scratch.order.resize(d);
      scratch.block.resize(d);
      scratch.start.resize(d);
    }
    return scratch;
  }
};

std::vector<torch::Tensor> prox_pairwise_max_rows(torch::Tensor x, torch::Tensor mask, double lam) {
  check_rows(x, mask);
  auto z = torch::empty_like(x);
  auto group = new_groups(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "prox_pairwise_max_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam);
    for_each_row<scalar_t>(x, mask, z, group.data_ptr<int32_t>(), std::numeric_limits<scalar_t>::infinity(),
                           [l, d](int64_t, const scalar_t* in, scalar_t* out, int32_t* g, int64_t n, scalar_t) {
                             auto& s = PoolScratch<scalar_t>::for_thread(d);
                             prox_pairwise_max_sorted(in, n, n, l, s.a.data(), s.order.data(), s.block.data(),
                                                      s.start.data(), s.sum.data());
                             for (int64_t k = 0; k < n; ++k) {
                               out[s.order[k]] = s.a[k];
                               g[s.order[k]] = s.block[k];
                             }
                           });
  });
  return {z, group};
}

// oscarmax = P_simplex(prox_P(x / gamma)) (Prop. 2) in one pass per row, computing the
// support only (oscarmax_row): group ids are -1 off the support. Unmasked float rows of up to
// 64 values on a CPU with AVX-512 take oscarmax_rows_avx512 (the same outputs).
std::vector<torch::Tensor> oscarmax_rows(torch::Tensor x, torch::Tensor mask, double gamma, double lam) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  auto group = new_groups(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (d <= kOscarRegisterD && unmasked_float_avx512(x, mask)) {
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    int32_t* gp = group.data_ptr<int32_t>();
    for_each_chunk_avx512(x, [&](int64_t begin, int64_t end, bool& non_finite, bool& overflow) {
      oscarmax_rows_avx512(xp + begin * d, yp + begin * d, gp + begin * d, end - begin, d, static_cast<float>(lam),
                           static_cast<float>(1.0 / gamma), max_spread<float>(gamma), non_finite, overflow);
    });
    return {y, group};
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "oscarmax_rows", [&] {
    const scalar_t l = static_cast<scalar_t>(lam), scale = static_cast<scalar_t>(1.0 / gamma);
    for_each_row<scalar_t>(x, mask, y, group.data_ptr<int32_t>(), max_spread<scalar_t>(gamma),
                           [l, d, scale](int64_t, const scalar_t* in, scalar_t* out, int32_t* g, int64_t n,
                                         scalar_t shift) {
                             auto& s = PoolScratch<scalar_t>::for_thread(d);
                             oscarmax_row(in, out, g, n, l, shift, scale, scratch<scalar_t>(d), scratch<int32_t>(d), s.a.data(),
                                          s.order.data(), s.block.data(), s.start.data(), s.sum.data());
                           });
  });
  return {y, group};
}

torch::Tensor entmax15_rows(torch::Tensor x, torch::Tensor mask) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax15_rows", [&] {
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(1.0),
                           [d](int64_t, const scalar_t* in, scalar_t* out, int32_t*, int64_t n, scalar_t shift) {
                             entmax15_row(in, out, n, shift, scratch<scalar_t>(d + kPad));
                           });
  });
  return y;
}

// grouped_simplex_jvp_row of the rows [begin, end) of (rows, d) tensors (float rows on a CPU
// with AVX-512: grouped_simplex_jvp_row_avx512), with per-thread scratch.
template <typename T>
void grouped_simplex_jvp_rows(const T* y, const T* g, T* out, int64_t d, const int32_t* group, int64_t begin,
                              int64_t end) {
  T* acc = scratch<T>(d);
  T* count = scratch<T, 1>(d);
  // kCompressSlack: the AVX-512 row's whole-vector stores (avx512_oscar.h)
  T* g_on = scratch<T, 2>(d + kCompressSlack);
  int32_t* support = scratch<int32_t>(d + kCompressSlack);
  int32_t* group_on = scratch<int32_t, 1>(d + kCompressSlack);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_enabled().load(std::memory_order_relaxed)) {
      for (int64_t r = begin; r < end; ++r) {
        grouped_simplex_jvp_row_avx512(y + r * d, g + r * d, out + r * d, d, group + r * d, support, g_on, group_on,
                                       acc, count);
      }
      return;
    }
  }
#endif
  for (int64_t r = begin; r < end; ++r) {
    grouped_simplex_jvp_row(y + r * d, g + r * d, out + r * d, d, group + r * d, support, g_on, group_on, acc, count);
  }
}

// J^T g of the sparse mappings (see sparse_jvp_row); y is 0 and group -1 at masked
// positions, so no gathering is needed. alpha = 2 for the simplex-projection family, whose
// result a non-empty int32 `group` then averages within groups (grouped_simplex_jvp_rows);
// a non-empty alpha_rows ((rows,), the output's dtype) gives one entmax alpha per row.
torch::Tensor sparse_jvp_rows(torch::Tensor y, torch::Tensor g, double alpha, torch::Tensor group,
                              torch::Tensor alpha_rows) {
  check_rows(y, torch::Tensor());
  TORCH_CHECK(g.sizes() == y.sizes() && g.is_contiguous() && g.scalar_type() == y.scalar_type(),
              "gradient must match the output's shape and dtype");
  const bool grouped = group.defined() && group.numel() > 0;
  if (grouped) {
    TORCH_CHECK(group.sizes() == y.sizes() && group.scalar_type() == torch::kInt && group.is_contiguous() &&
                    alpha == 2.0,
                "groups must be a contiguous int32 tensor of the output's shape, with alpha = 2");
  }
  auto out = torch::empty_like(y);
  const int64_t rows = y.size(0), d = y.size(1);
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "sparse_jvp_rows", [&] {
    const scalar_t* yp = y.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int32_t* grp = grouped ? group.data_ptr<int32_t>() : nullptr;
    const scalar_t a = static_cast<scalar_t>(alpha);
    const bool per_row = alpha_rows.defined() && alpha_rows.numel() > 0;
    if (per_row) {
      TORCH_CHECK(alpha_rows.dim() == 1 && alpha_rows.size(0) == rows && alpha_rows.scalar_type() == y.scalar_type() &&
                  alpha_rows.is_contiguous(), "alpha_rows must be a contiguous (rows,) tensor of the output's dtype");
    }
    const scalar_t* ap = per_row ? alpha_rows.data_ptr<scalar_t>() : nullptr;
    auto run = [&](auto row_fn) {
      at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
        for (int64_t r = begin; r < end; ++r) row_fn(yp + r * d, gp + r * d, op + r * d, d, ap ? ap[r] : a);
      });
    };
    if (grouped) {
      at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
        grouped_simplex_jvp_rows(yp, gp, op, d, grp, begin, end);
      });
    } else if (per_row) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kPow>);
    } else if (alpha == 2.0) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kOne>);
    } else if (alpha == 1.5) {
      run(sparse_jvp_row<scalar_t, SupportWeight::kSqrt>);
    } else {
      run(sparse_jvp_row<scalar_t, SupportWeight::kPow>);
    }
  });
  return out;
}

// A masked float row of up to kEntmaxRegisterD unmasked values runs the register kernel that
// an unmasked row of those values runs (entmax_halley_rows_avx512 on the gathered values,
// which for_each_row has checked), so that masking positions (or -inf scores, see
// mappings/_rows.py) and removing them give the same floats: the scalar iteration may differ
// from it by an ulp. False where it does not apply (double, longer rows, no AVX-512).
template <typename T>
bool entmax_masked_row_avx512(const T* in, T* out, T* weight, T alpha, int64_t n) {
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    if (n <= kEntmaxRegisterD && avx512_enabled().load(std::memory_order_relaxed)) {
      bool non_finite = false, overflow = false;
      entmax_halley_rows_avx512(in, out, weight, &alpha, 1, n, max_spread<float>(1.0), non_finite, overflow);
      return true;
    }
  }
#endif
  return false;
}

// alpha-entmax with one alpha per row (alpha: (rows,) tensor of the scores' dtype, > 1), by
// safeguarded Halley/Newton steps on the threshold (entmax_halley_row; unmasked float rows of
// up to 64 values on a CPU with AVX-512: entmax_halley_rows_avx512, in registers).
torch::Tensor entmax_halley_rows(torch::Tensor x, torch::Tensor mask, torch::Tensor alpha) {
  check_rows(x, mask);
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == x.size(0) && alpha.scalar_type() == x.scalar_type() &&
                  alpha.is_contiguous(), "alpha must be a contiguous (rows,) tensor of the scores' dtype");
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (entmax_rows_avx512(x, mask, alpha, y, nullptr)) return y;
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax_halley_rows", [&] {
    const scalar_t* ap = alpha.data_ptr<scalar_t>();
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(1.0),
                           [d, ap](int64_t r, const scalar_t* in, scalar_t* out, int32_t*, int64_t n, scalar_t shift) {
                             if (entmax_masked_row_avx512<scalar_t>(in, out, nullptr, ap[r], n)) return;
                             entmax_halley_row(in, out, n, ap[r], shift, scratch<scalar_t>(d), scratch<int32_t>(d),
                                               scratch<scalar_t, 1>(d + kPad), scratch<scalar_t, 3>(d + kPad),
                                               scratch<int32_t, 1>(d));
                           });
  });
  return y;
}

// The same, also returning the backward pass's weights y^{2-alpha} (see entmax_halley_row).
// Masked positions get 0 in both.
std::vector<torch::Tensor> entmax_halley_weights_rows(torch::Tensor x, torch::Tensor mask, torch::Tensor alpha) {
  check_rows(x, mask);
  TORCH_CHECK(alpha.dim() == 1 && alpha.size(0) == x.size(0) && alpha.scalar_type() == x.scalar_type() &&
                  alpha.is_contiguous(), "alpha must be a contiguous (rows,) tensor of the scores' dtype");
  auto y = torch::empty_like(x);
  auto w = torch::empty_like(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (entmax_rows_avx512(x, mask, alpha, y, &w)) return {y, w};
#endif
  const bool* mp = (mask.defined() && mask.numel() > 0) ? mask.data_ptr<bool>() : nullptr;
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "entmax_halley_weights_rows", [&] {
    const scalar_t* ap = alpha.data_ptr<scalar_t>();
    scalar_t* wp = w.data_ptr<scalar_t>();
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(1.0),
                           [d, ap, wp, mp](int64_t r, const scalar_t* in, scalar_t* out, int32_t*, int64_t n,
                                           scalar_t shift) {
                             scalar_t* weight = mp ? scratch<scalar_t, 2>(d) : wp + r * d;
                             if (!entmax_masked_row_avx512<scalar_t>(in, out, weight, ap[r], n)) {
                               entmax_halley_row(in, out, n, ap[r], shift, scratch<scalar_t>(d), scratch<int32_t>(d),
                                                 scratch<scalar_t, 1>(d + kPad), scratch<scalar_t, 3>(d + kPad),
                                                 scratch<int32_t, 1>(d), weight);
                             }
                             if (mp) {  // scatter to the unmasked positions, as for_each_row does y
                               const bool* mr = mp + r * d;
                               scalar_t* wr = wp + r * d;
                               for (int64_t i = 0, j = 0; i < d; ++i) wr[i] = mr[i] ? weight[j++] : scalar_t(0);
                             }
                           });
  });
  return {y, w};
}

// J^T g with given support weights w (weighted_jvp_row).
torch::Tensor weighted_jvp_rows(torch::Tensor w, torch::Tensor g) {
  check_rows(w, torch::Tensor());
  TORCH_CHECK(g.sizes() == w.sizes() && g.is_contiguous() && g.scalar_type() == w.scalar_type(),
              "gradient must match the weights' shape and dtype");
  auto out = torch::empty_like(w);
  const int64_t rows = w.size(0), d = w.size(1);
  AT_DISPATCH_FLOATING_TYPES(w.scalar_type(), "weighted_jvp_rows", [&] {
    const scalar_t* wp = w.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) weighted_jvp_row(wp + r * d, gp + r * d, op + r * d, d);
    });
  });
  return out;
}

// sq-pnorm-max of each row (sq_pnorm_max_row; for p = 1.5, unmasked float rows of up to 64
// values on a CPU with AVX-512: sq_pnorm15_rows_avx512, in registers).
torch::Tensor sq_pnorm_max_rows(torch::Tensor x, torch::Tensor mask, double gamma, double p) {
  check_rows(x, mask);
  auto y = torch::empty_like(x);
  const int64_t d = x.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (p == 1.5 && d <= kSqPnormRegisterD && unmasked_float_avx512(x, mask)) {
    // no temperature scales the scores here: the rows are checked as for_each_row checks them
    // below, for gamma = 1 (max_spread(1.0)), and the kernel takes gamma itself
    const float* xp = x.data_ptr<float>();
    float* yp = y.data_ptr<float>();
    for_each_chunk_avx512(x, [&](int64_t begin, int64_t end, bool& non_finite, bool& overflow) {
      sq_pnorm15_rows_avx512(xp + begin * d, yp + begin * d, end - begin, d, static_cast<float>(gamma),
                             max_spread<float>(1.0), non_finite, overflow);
    });
    return y;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "sq_pnorm_max_rows", [&] {
    const scalar_t g = static_cast<scalar_t>(gamma), pp = static_cast<scalar_t>(p);
    for_each_row<scalar_t>(x, mask, y, nullptr, max_spread<scalar_t>(1.0),
                           [d, g, pp](int64_t, const scalar_t* in, scalar_t* out, int32_t*, int64_t n, scalar_t shift) {
                             sq_pnorm_max_row(in, out, n, g, pp, shift, scratch<scalar_t>(d + kPad));
                           });
  });
  return y;
}

// Backward of sq-pnorm-max (see sq_pnorm_max_jvp_row; for p = 1.5, float rows on a CPU with
// AVX-512: sq_pnorm15_jvp_row_avx512); y is 0 at masked positions, which therefore get 0 with
// no gathering.
torch::Tensor sq_pnorm_max_jvp_rows(torch::Tensor y, torch::Tensor v, double gamma, double p) {
  check_rows(y, torch::Tensor());
  TORCH_CHECK(v.sizes() == y.sizes() && v.is_contiguous() && v.scalar_type() == y.scalar_type(),
              "the vector must match the output's shape and dtype");
  auto out = torch::empty_like(y);
  const int64_t rows = y.size(0), d = y.size(1);
#ifdef REGATTN_HAVE_AVX2_POWERS
  if (p == 1.5 && unmasked_float_avx512(y, torch::Tensor())) {
    const float* yp = y.data_ptr<float>();
    const float* vp = v.data_ptr<float>();
    float* op = out.data_ptr<float>();
    const float g = static_cast<float>(gamma);
    at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) sq_pnorm15_jvp_row_avx512(yp + r * d, vp + r * d, op + r * d, d, g);
    });
    return out;
  }
#endif
  AT_DISPATCH_FLOATING_TYPES(y.scalar_type(), "sq_pnorm_max_jvp_rows", [&] {
    const scalar_t* yp = y.data_ptr<scalar_t>();
    const scalar_t* vp = v.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const scalar_t g = static_cast<scalar_t>(gamma), pp = static_cast<scalar_t>(p);
    at::parallel_for(0, rows, grain_for(d), [&](int64_t begin, int64_t end) {
      for (int64_t r = begin; r < end; ++r) sq_pnorm_max_jvp_row(yp + r * d, vp + r * d, op + r * d, d, g, pp);
    });
  });
  return out;
}

// Smoothed Viterbi sweeps (dp_sweeps.h) over a (batch, T, S, S) contiguous theta, in
// parallel over sequences. lengths: (batch,) int64 in [1, T] (checked by dp.py; the bounds
// again here, so that no sweep reads past theta), or an empty tensor for "all T".
const int64_t* checked_lengths(const torch::Tensor& lengths, int64_t batch, int64_t steps) {
  if (!lengths.defined() || lengths.numel() == 0) return nullptr;
  TORCH_CHECK(lengths.dim() == 1 && lengths.size(0) == batch && lengths.scalar_type() == torch::kLong &&
                  lengths.is_contiguous() && lengths.device().is_cpu(),
              "lengths must be a contiguous (batch,) int64 CPU tensor");
  const int64_t* lp = lengths.data_ptr<int64_t>();
  for (int64_t b = 0; b < batch; ++b) {
    TORCH_CHECK_VALUE(lp[b] >= 1 && lp[b] <= steps, "lengths must lie in [1, ", steps, "], got ", lp[b]);
  }
  return lp;
}

void check_chain(const torch::Tensor& theta, const char* what) {
  TORCH_CHECK(theta.dim() == 4 && theta.size(2) == theta.size(3) && theta.is_contiguous() && theta.device().is_cpu(),
              what, " must be a contiguous (batch, T, S, S) CPU tensor");
}

DpReg dp_reg(const std::string& reg) {
  TORCH_CHECK_VALUE(reg == "entropy" || reg == "l2", "reg must be 'entropy' or 'l2', got '", reg, "'");
  return reg == "entropy" ? DpReg::kEntropy : DpReg::kL2;
}

// Collects the sweeps' DpInputFlags across threads and raises dp.py's ValueErrors for them.
struct SharedDpFlags {
  std::atomic<bool> nan{false}, pos_inf{false}, no_path{false};
  void add(const DpInputFlags& f) {
    if (f.nan) nan = true;
    if (f.pos_inf) pos_inf = true;
    if (f.no_path) no_path = true;
  }
  void raise() const {
    TORCH_CHECK_VALUE(!nan, "theta contains NaN");
    TORCH_CHECK_VALUE(!pos_inf, "theta contains +inf");
    TORCH_CHECK_VALUE(!no_path, "theta leaves some sequence with no path of finite score");
  }
};

int64_t chain_grain(int64_t steps, int64_t states) { return grain_for(steps * states * states); }

// theta -> (value (batch,), Q (batch, T, S, S), q (batch, S)).
std::vector<torch::Tensor> viterbi_forward_sweep(torch::Tensor theta, torch::Tensor lengths, std::string reg,
                                                 double gamma) {
  check_chain(theta, "theta");
  const DpReg r = dp_reg(reg);
  const int64_t batch = theta.size(0), steps = theta.size(1), states = theta.size(2);
  const int64_t* lp = checked_lengths(lengths, batch, steps);
  auto value = torch::empty({batch}, theta.options());
  auto q = torch::empty_like(theta);
  auto q_final = torch::empty({batch, states}, theta.options());
  SharedDpFlags flags;
  AT_DISPATCH_FLOATING_TYPES(theta.scalar_type(), "viterbi_forward_sweep", [&] {
    const scalar_t* tp = theta.data_ptr<scalar_t>();
    scalar_t* vp = value.data_ptr<scalar_t>();
    scalar_t* qp = q.data_ptr<scalar_t>();
    scalar_t* fp = q_final.data_ptr<scalar_t>();
    const scalar_t g = static_cast<scalar_t>(gamma);
    const int64_t seq = steps * states * states;
    at::parallel_for(0, batch, chain_grain(steps, states), [&](int64_t begin, int64_t end) {
      ViterbiScratch<scalar_t> s(states);
      DpInputFlags local;
      for (int64_t b = begin; b < end; ++b) {
        vp[b] = viterbi_forward_sequence(tp + b * seq, steps, lp ? lp[b] : steps, states, r, g, qp + b * seq,
                                         fp + b * states, s, local);
      }
      flags.add(local);
    });
  });
  flags.raise();
  return {value, q, q_final};
}

// (Q (batch, T, S, S), U_T (batch, S)) -> (E (batch, T, S, S), U_0..U_T (batch, T + 1, S)).
std::vector<torch::Tensor> viterbi_marginals_sweep(torch::Tensor q, torch::Tensor u_final, torch::Tensor lengths) {
  check_chain(q, "Q");
  const int64_t batch = q.size(0), steps = q.size(1), states = q.size(2);
  TORCH_CHECK(u_final.dim() == 2 && u_final.size(0) == batch && u_final.size(1) == states &&
                  u_final.is_contiguous() && u_final.scalar_type() == q.scalar_type(),
              "U_T must be a contiguous (batch, S) tensor of Q's dtype");
  const int64_t* lp = checked_lengths(lengths, batch, steps);
  auto marg = torch::empty_like(q);
  auto mass = torch::empty({batch, steps + 1, states}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "viterbi_marginals_sweep", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t* up = u_final.data_ptr<scalar_t>();
    scalar_t* ep = marg.data_ptr<scalar_t>();
    scalar_t* mp = mass.data_ptr<scalar_t>();
    const int64_t seq = steps * states * states;
    at::parallel_for(0, batch, chain_grain(steps, states), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        viterbi_marginals_sequence(qp + b * seq, up + b * states, steps, lp ? lp[b] : steps, states, ep + b * seq,
                                   mp + b * (steps + 1) * states);
      }
    });
  });
  return {marg, mass};
}

// theta -> the hard Viterbi paths (batch, T + 1), int64, -1 past each length.
torch::Tensor viterbi_decode_sweep(torch::Tensor theta, torch::Tensor lengths) {
  check_chain(theta, "theta");
  const int64_t batch = theta.size(0), steps = theta.size(1), states = theta.size(2);
  const int64_t* lp = checked_lengths(lengths, batch, steps);
  auto path = torch::empty({batch, steps + 1}, theta.options().dtype(torch::kLong));
  SharedDpFlags flags;
  AT_DISPATCH_FLOATING_TYPES(theta.scalar_type(), "viterbi_decode_sweep", [&] {
    const scalar_t* tp = theta.data_ptr<scalar_t>();
    int64_t* pp = path.data_ptr<int64_t>();
    const int64_t seq = steps * states * states;
    at::parallel_for(0, batch, chain_grain(steps, states), [&](int64_t begin, int64_t end) {
      ViterbiScratch<scalar_t> s(states);
      std::vector<int32_t> pointers(steps * states);
      DpInputFlags local;
      for (int64_t b = begin; b < end; ++b) {
        viterbi_decode_sequence(tp + b * seq, lp ? lp[b] : steps, steps, states, pp + b * (steps + 1),
                                pointers.data(), s, local);
      }
      flags.add(local);
    });
  });
  flags.raise();
  return path;
}

// Smoothed DTW sweeps (dp_sweeps.h) over (batch, m, n) finite costs (checked by dp.py, which
// also zeroes the costs past each sequence's lengths), in parallel over sequences:
// theta -> (R (batch, m + 1, n + 1), q (batch, m + 2, n + 2, 3)).
std::vector<torch::Tensor> dtw_forward_sweep(torch::Tensor theta, std::string reg, double gamma) {
  TORCH_CHECK(theta.dim() == 3 && theta.is_contiguous() && theta.device().is_cpu(),
              "theta must be a contiguous (batch, m, n) CPU tensor");
  const DpReg r = dp_reg(reg);
  const int64_t batch = theta.size(0), m = theta.size(1), n = theta.size(2);
  auto values = torch::empty({batch, m + 1, n + 1}, theta.options());
  auto q = torch::empty({batch, m + 2, n + 2, 3}, theta.options());
  AT_DISPATCH_FLOATING_TYPES(theta.scalar_type(), "dtw_forward_sweep", [&] {
    const scalar_t* tp = theta.data_ptr<scalar_t>();
    scalar_t* rp = values.data_ptr<scalar_t>();
    scalar_t* qp = q.data_ptr<scalar_t>();
    const scalar_t g = static_cast<scalar_t>(gamma);
    at::parallel_for(0, batch, grain_for(3 * m * n), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        dtw_forward_sequence(tp + b * m * n, m, n, r, g, rp + b * (m + 1) * (n + 1), qp + b * (m + 2) * (n + 2) * 3);
      }
    });
  });
  return {values, q};
}

// (q (batch, m + 2, n + 2, 3), the end cells ends_m, ends_n ((batch,) int64 in [1, m], [1, n]))
// -> the expected alignments E (batch, m + 2, n + 2), 0 outside the cells 1..m x 1..n.
torch::Tensor dtw_marginals_sweep(torch::Tensor q, torch::Tensor ends_m, torch::Tensor ends_n) {
  TORCH_CHECK(q.dim() == 4 && q.size(3) == 3 && q.is_contiguous() && q.device().is_cpu(),
              "q must be a contiguous (batch, m + 2, n + 2, 3) CPU tensor");
  const int64_t batch = q.size(0), m = q.size(1) - 2, n = q.size(2) - 2;
  const int64_t* ip = checked_lengths(ends_m, batch, m);
  const int64_t* jp = checked_lengths(ends_n, batch, n);
  TORCH_CHECK(ip && jp, "ends_m and ends_n must be given");
  auto e = torch::empty({batch, m + 2, n + 2}, q.options());
  AT_DISPATCH_FLOATING_TYPES(q.scalar_type(), "dtw_marginals_sweep", [&] {
    const scalar_t* qp = q.data_ptr<scalar_t>();
    scalar_t* ep = e.data_ptr<scalar_t>();
    at::parallel_for(0, batch, grain_for(3 * m * n), [&](int64_t begin, int64_t end) {
      for (int64_t b = begin; b < end; ++b) {
        dtw_marginals_sequence(qp + b * (m + 2) * (n + 2) * 3, m, n, ip[b], jp[b], ep + b * (m + 2) * (n + 2));
      }
    });
  });
  return e;
}

}  // namespace
}  // namespace regattn

namespace regattn {
torch::Tensor softmax_rows_differentiable(torch::Tensor x, torch::Tensor mask, double gamma);
}  // namespace regattn

PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {
  m.doc() = "regattn CPU kernels (rows x d, optional bool mask)";
  m.def("softmax_rows", &regattn::softmax_rows_differentiable,
        "softmax(x / gamma) of each row, differentiable where x requires grad (its backward in C++)");
  m.def("sparsemax_rows", &regattn::sparsemax_rows, "P_simplex(x / gamma) of each row");
  m.def("prox_tv1d_rows", &regattn::prox_tv1d_rows, "1-D TV prox of each row -> (z, segment id)");
  m.def("prox_pairwise_max_rows", &regattn::prox_pairwise_max_rows, "prox of lam*sum_{i<j} max(z_i, z_j) of each row -> (z, cluster id)");
  m.def("fusedmax_rows", &regattn::fusedmax_rows, "P_simplex(prox_TV(x / gamma)) of each row -> (y, segment id)");
  m.def("oscarmax_rows", &regattn::oscarmax_rows, "P_simplex(prox_pairwise_max(x / gamma)) of each row -> (y, cluster id)");
  m.def("sparse_jvp_rows", &regattn::sparse_jvp_rows, "backward of the sparse mappings, optionally group-averaged");
  m.def("entmax_halley_rows", &regattn::entmax_halley_rows,
        "alpha-entmax of each row, one alpha per row, by safeguarded Halley/Newton on the threshold");
  m.def("entmax_halley_weights_rows", &regattn::entmax_halley_weights_rows,
        "alpha-entmax of each row -> (y, y^{2-alpha} on the support)");
  m.def("weighted_jvp_rows", &regattn::weighted_jvp_rows, "backward of alpha-entmax from its weights");
  m.def("sq_pnorm_max_rows", &regattn::sq_pnorm_max_rows, "sq-pnorm-max of each row");
  m.def("sq_pnorm_max_jvp_rows", &regattn::sq_pnorm_max_jvp_rows, "backward of sq-pnorm-max (J v, J symmetric)");
  m.def("entmax15_rows", &regattn::entmax15_rows, "exact 1.5-entmax of each row");
  m.def("viterbi_forward_sweep", &regattn::viterbi_forward_sweep,
        "smoothed Viterbi forward: theta -> (value, local argmax Q, final argmax q)");
  m.def("viterbi_marginals_sweep", &regattn::viterbi_marginals_sweep,
        "smoothed Viterbi reverse sweep: (Q, U_T) -> (expected transitions E, mass U_0..U_T)");
  m.def("viterbi_decode_sweep", &regattn::viterbi_decode_sweep, "hard Viterbi paths, -1 past each length");
  m.def("dtw_forward_sweep", &regattn::dtw_forward_sweep, "smoothed DTW forward: costs -> (R, local weights q)");
  m.def("dtw_marginals_sweep", &regattn::dtw_marginals_sweep, "smoothed DTW reverse sweep: (q, end cells) -> E");
  m.def("range_within", &regattn::range_within,
        "whether every value is finite and max - min <= limit (whole tensor, one pass)");
  m.def(
      "use_vector_isa",
      [](const std::string& isa) {
        TORCH_CHECK_VALUE(isa == "avx512" || isa == "avx2" || isa == "portable",
                          "use_vector_isa takes 'avx512', 'avx2' or 'portable', got '", isa, "'");
        const bool avx512 = isa == "avx512" && regattn::avx512_available();
        const bool avx2 = isa != "portable" && regattn::avx2_available();
        regattn::avx512_enabled() = avx512;
        regattn::avx2_enabled() = avx2;
        return isa == "avx512" ? avx512 : isa == "avx2" ? avx2 : true;
      },
      "the widest vector paths the float32 kernels take: 'avx512' (the default: AVX-512 where the "
      "CPU has it, else AVX2), 'avx2', or 'portable' (neither); returns whether the CPU has the "
      "ISA asked for (tests run every path the machine has)");
}

// The same kernels as dispatcher operators regattn::<name> (CPU kernels here; the fake/meta
// implementations that give output shapes to torch.compile are in mappings/_kernels.py), so
// that torch.compile traces them into its graph instead of breaking it at an opaque pybind
// call. Python calls them as torch.ops.regattn.<name>.default (mappings/_kernels.py). "No
// mask" (and "no group"/"no per-row alpha") is an empty tensor, as in the pybind functions.
namespace regattn {
namespace {
std::tuple<torch::Tensor, torch::Tensor> as_pair(std::vector<torch::Tensor> v) { return {v[0], v[1]}; }

// regattn::softmax_rows differentiable in C++: its backward is the kernel of torch.softmax's
// own, (diag(y) - y y^T) g / gamma. A Python autograd.Function costs tens of microseconds per
// call on top of this, a fifth of a whole softmax at attention sizes. The forward dispatches
// below autograd, to the CPU kernel or (under torch.compile) to the fake of _kernels.py.
class SoftmaxRowsAutograd : public torch::autograd::Function<SoftmaxRowsAutograd> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x,
                               const torch::Tensor& mask, double gamma) {
    static const auto op = c10::Dispatcher::singleton()
                               .findSchemaOrThrow("regattn::softmax_rows", "")
                               .typed<torch::Tensor(torch::Tensor, torch::Tensor, double)>();  // as the kernels
    at::AutoDispatchBelowADInplaceOrView below_autograd;
    torch::Tensor y = op.call(x, mask, gamma);
    ctx->save_for_backward({y});
    ctx->saved_data["gamma"] = gamma;
    return y;
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor y = ctx->get_saved_variables()[0];
    const double gamma = ctx->saved_data["gamma"].toDouble();
    torch::Tensor vjp = at::_softmax_backward_data(grads[0], y, -1, y.scalar_type());
    if (gamma != 1.0) vjp = vjp / gamma;
    return {vjp, torch::Tensor(), torch::Tensor()};
  }
};

}  // namespace
}  // namespace regattn

TORCH_LIBRARY(regattn, m) {
  m.def("softmax_rows(Tensor x, Tensor mask, float gamma) -> Tensor");
  m.def("sparsemax_rows(Tensor x, Tensor mask, float gamma) -> Tensor");
  m.def("prox_tv1d_rows(Tensor x, Tensor mask, float lam) -> (Tensor, Tensor)");
  m.def("prox_pairwise_max_rows(Tensor x, Tensor mask, float lam) -> (Tensor, Tensor)");
  m.def("fusedmax_rows(Tensor x, Tensor mask, float gamma, float lam) -> (Tensor, Tensor)");
  m.def("oscarmax_rows(Tensor x, Tensor mask, float gamma, float lam) -> (Tensor, Tensor)");
  m.def("sparse_jvp_rows(Tensor y, Tensor g, float alpha, Tensor group, Tensor alpha_rows) -> Tensor");
  m.def("entmax_halley_rows(Tensor x, Tensor mask, Tensor alpha) -> Tensor");
  m.def("entmax_halley_weights_rows(Tensor x, Tensor mask, Tensor alpha) -> (Tensor, Tensor)");
  m.def("weighted_jvp_rows(Tensor w, Tensor g) -> Tensor");
  m.def("sq_pnorm_max_rows(Tensor x, Tensor mask, float gamma, float p) -> Tensor");
  m.def("sq_pnorm_max_jvp_rows(Tensor y, Tensor v, float gamma, float p) -> Tensor");
  m.def("entmax15_rows(Tensor x, Tensor mask) -> Tensor");
  m.def("viterbi_forward_sweep(Tensor theta, Tensor lengths, str reg, float gamma) -> (Tensor, Tensor, Tensor)");
  m.def("viterbi_marginals_sweep(Tensor q, Tensor u_final, Tensor lengths) -> (Tensor, Tensor)");
  m.def("viterbi_decode_sweep(Tensor theta, Tensor lengths) -> Tensor");
  m.def("dtw_forward_sweep(Tensor theta, str reg, float gamma) -> (Tensor, Tensor)");
  m.def("dtw_marginals_sweep(Tensor q, Tensor ends_m, Tensor ends_n) -> Tensor");
}

TORCH_LIBRARY_IMPL(regattn, CPU, m) {
  m.impl("softmax_rows", &regattn::softmax_rows);
  m.impl("sparsemax_rows", &regattn::sparsemax_rows);
  m.impl("prox_tv1d_rows", [](torch::Tensor x, torch::Tensor mask, double lam) {
    return regattn::as_pair(regattn::prox_tv1d_rows(x, mask, lam));
  });
  m.impl("prox_pairwise_max_rows", [](torch::Tensor x, torch::Tensor mask, double lam) {
    return regattn::as_pair(regattn::prox_pairwise_max_rows(x, mask, lam));
  });
  m.impl("fusedmax_rows", [](torch::Tensor x, torch::Tensor mask, double gamma, double lam) {
    return regattn::as_pair(regattn::fusedmax_rows(x, mask, gamma, lam));
  });
  m.impl("oscarmax_rows", [](torch::Tensor x, torch::Tensor mask, double gamma, double lam) {
    return regattn::as_pair(regattn::oscarmax_rows(x, mask, gamma, lam));
  });
  m.impl("sparse_jvp_rows", &regattn::sparse_jvp_rows);
  m.impl("entmax_halley_rows", &regattn::entmax_halley_rows);
  m.impl("entmax_halley_weights_rows", [](torch::Tensor x, torch::Tensor mask, torch::Tensor alpha) {
    return regattn::as_pair(regattn::entmax_halley_weights_rows(x, mask, alpha));
  });
  m.impl("weighted_jvp_rows", &regattn::weighted_jvp_rows);
  m.impl("sq_pnorm_max_rows", &regattn::sq_pnorm_max_rows);
  m.impl("sq_pnorm_max_jvp_rows", &regattn::sq_pnorm_max_jvp_rows);
  m.impl("entmax15_rows", &regattn::entmax15_rows);
  m.impl("viterbi_forward_sweep", [](torch::Tensor theta, torch::Tensor lengths, c10::string_view reg, double gamma) {
    auto out = regattn::viterbi_forward_sweep(theta, lengths, std::string(reg), gamma);
    return std::make_tuple(out[0], out[1], out[2]);
  });
  m.impl("viterbi_marginals_sweep", [](torch::Tensor q, torch::Tensor u_final, torch::Tensor lengths) {
    return regattn::as_pair(regattn::viterbi_marginals_sweep(q, u_final, lengths));
  });
  m.impl("viterbi_decode_sweep", &regattn::viterbi_decode_sweep);
  m.impl("dtw_forward_sweep", [](torch::Tensor theta, c10::string_view reg, double gamma) {
    return regattn::as_pair(regattn::dtw_forward_sweep(theta, std::string(reg), gamma));
  });
  m.impl("dtw_marginals_sweep", &regattn::dtw_marginals_sweep);
}

namespace regattn {
// The pybind softmax_rows: the differentiable operator's autograd Function where a gradient
// may be asked for, else the kernel, with no call through the dispatcher from Python (whose
// boxed call costs microseconds that, after a kernel has streamed megabytes through the
// caches, grow to tens).
torch::Tensor softmax_rows_differentiable(torch::Tensor x, torch::Tensor mask, double gamma) {
  if (x.requires_grad() && torch::GradMode::is_enabled()) return SoftmaxRowsAutograd::apply(x, mask, gamma);
  return softmax_rows(x, mask, gamma);
}
}  // namespace regattn

TORCH_LIBRARY_IMPL(regattn, Autograd, m) {
  m.impl("softmax_rows", [](torch::Tensor x, torch::Tensor mask, double gamma) {
    return regattn::SoftmaxRowsAutograd::apply(x, mask, gamma);
  });
}
