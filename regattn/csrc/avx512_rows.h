// Softmax in 16 float lanes on x86-64 CPUs with AVX-512F (chosen at run
// time, as the AVX2 paths of avx2_powers.h and avx2_rows.h: the extension itself is built for
// baseline x86-64). Masked loads and stores take a row's last partial vector, so a 50-wide
// attention row is four vector steps with no scalar tail; torch.softmax runs in 16 lanes on
// these CPUs, and the fused check and softmax of the CPU kernel has to as well to cost no more.
#pragma once

#include <cstdint>

#include "avx2_powers.h"

#ifdef REGATTN_HAVE_AVX2_POWERS
#include <immintrin.h>
#endif

namespace regattn {

#ifdef REGATTN_HAVE_AVX2_POWERS
// The lanes of the vector step at offset k of a row of n values.
__attribute__((target("avx512f"))) inline __mmask16 lanes16(int64_t k, int64_t n) {
  const int64_t left = n - k;
  return left >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << left) - 1u);
}

// e^x for x <= 0 in 16 lanes: x = n ln2 + g with |g| <= ln2 / 2 (ln2 in two parts, so that
// n ln2 is exact), e^g by its Taylor polynomial of degree 7 (truncation below 2^-27, half an
// ulp of float), and 2^n applied by scalef, which rounds to subnormals and 0 as e^x would.
__attribute__((target("avx512f"))) inline __m512 exp16_nonpositive(__m512 x) {
  x = _mm512_max_ps(x, _mm512_set1_ps(-104.0f));  // e^-104 rounds to 0 in float
  const __m512 n = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(1.44269504088896341f)),
                                        _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m512 g = _mm512_fnmadd_ps(n, _mm512_set1_ps(0.693359375f), x);
  g = _mm512_fnmadd_ps(n, _mm512_set1_ps(-2.12194440054690583e-4f), g);
  __m512 p = _mm512_set1_ps(1.0f / 5040);
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f));
  return _mm512_scalef_ps(p, n);
}

// softmax_row (row_algorithms.h) of a float row: y = e^v / sum e^v with v = (z - shift) *
// scale <= 0, the exponentials and their sum in one pass, the normalization in a second.
__attribute__((target("avx512f"))) inline void softmax_row_avx512(const float* z, float* y, int64_t n, float shift,
                                                                  float scale) {
  const __m512 s = _mm512_set1_ps(shift), c = _mm512_set1_ps(scale);
  __m512 sum = _mm512_setzero_ps();
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = lanes16(k, n);
    const __m512 e = exp16_nonpositive(_mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, z + k), s), c));
    _mm512_mask_storeu_ps(y + k, m, e);
    sum = _mm512_mask_add_ps(sum, m, sum, e);
  }
  const __m512 inv = _mm512_set1_ps(1.0f / _mm512_reduce_add_ps(sum));
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = lanes16(k, n);
    _mm512_mask_storeu_ps(y + k, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, y + k), inv));
  }
}

// The check for_each_row makes of a row (row_range and max_spread), for the chunk kernels
// below: false, with non_finite or overflow set, on a row with a NaN or infinite value or
// one whose max - min exceeds `limit`; else true, with `shift` the row's max. The min and the
// finiteness are compared lane by lane, with no reduction (v * 0 is NaN for NaN and inf).
__attribute__((target("avx512f"))) inline bool checked_row_max_avx512(const float* z, int64_t d, float limit,
                                                                      float& shift, bool& non_finite,
                                                                      bool& overflow) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 h = _mm512_set1_ps(-__builtin_inff()), l = _mm512_set1_ps(__builtin_inff()), nan_if_not_finite = zero;
  for (int64_t k = 0; k < d; k += 16) {
    const __mmask16 m = lanes16(k, d);
    const __m512 v = _mm512_maskz_loadu_ps(m, z + k);  // masked lanes read as 0
    h = _mm512_mask_max_ps(h, m, h, v);
    l = _mm512_mask_min_ps(l, m, l, v);
    nan_if_not_finite = _mm512_fmadd_ps(v, zero, nan_if_not_finite);
  }
  if (_mm512_cmp_ps_mask(nan_if_not_finite, zero, _CMP_NEQ_UQ)) {
    non_finite = true;
    return false;
  }
  shift = _mm512_reduce_max_ps(h);
  if (_mm512_cmp_ps_mask(_mm512_sub_ps(_mm512_set1_ps(shift), l), _mm512_set1_ps(limit), _CMP_GT_OQ)) {
    overflow = true;
    return false;
  }
  return true;
}

// Softmax of the unmasked float rows [0, rows) of x (each of d values) into y, each row
// checked as for_each_row checks it (checked_row_max_avx512; a failing row is skipped and the
// caller raises), with no call per row: on 30-50 wide rows the calls and reductions per row
// are what the loops would otherwise cost.
__attribute__((target("avx512f"))) inline void softmax_rows_avx512(const float* x, float* y, int64_t rows, int64_t d,
                                                                   float scale, float limit, bool& non_finite,
                                                                   bool& overflow) {
  for (int64_t r = 0; r < rows; ++r) {
    float shift;
    if (checked_row_max_avx512(x + r * d, d, limit, shift, non_finite, overflow)) {
      softmax_row_avx512(x + r * d, y + r * d, d, shift, scale);
    }
  }
}

// Michelot's passes (as michelot_threshold in row_algorithms.h) over the values of up to
// kSparsemaxRegisterD / 16 registers, the lanes of `lanes` (0 for unused registers), from the
// set of values above `tau`: tau = (sum of the values above tau - 1) / their count until the
// set stops changing or tau stops growing. Each pass adds the registers' values above tau
// lane by lane and reduces the lanes once: the reduction (four dependent shuffles and adds)
// and the division are the chain that sets each pass's time, not the adds.
constexpr int64_t kSparsemaxRegisterD = 64;
constexpr int kThresholdRegisters = kSparsemaxRegisterD / 16;

__attribute__((target("avx512f"))) inline float michelot_threshold_avx512(const __m512* v, const __mmask16* lanes,
                                                                         float tau) {
  int count_before = -1;
  for (;;) {
    const __m512 t = _mm512_set1_ps(tau);
    __m512 sums = _mm512_setzero_ps();
    int count = 0;
    for (int k = 0; k < kThresholdRegisters; ++k) {
      const __mmask16 above = _mm512_mask_cmp_ps_mask(lanes[k], v[k], t, _CMP_GT_OQ);
      sums = _mm512_mask_add_ps(sums, above, sums, v[k]);
      count += __builtin_popcount(above);
    }
    if (count == count_before) break;  // the same set as the last pass: tau is its threshold
    const float next = (_mm512_reduce_add_ps(sums) - 1.0f) / static_cast<float>(count);
    if (!(next > tau)) break;
    tau = next;
    count_before = count;
  }
  return tau;
}

// simplex_threshold_pairwise (row_algorithms.h) of the m <= 16 candidates in the first lanes
// of one register: the threshold by all pairwise comparisons (candidate i is in the support
// iff 1 + k_i c_i > S_i, k_i the number of candidates >= c_i and S_i their sum), with no
// iteration. On the usual 5-12 candidates of attention rows this is m broadcasts (lane
// permutes, from the register) and compares, where Michelot's passes are a chain of three or
// four reductions and divisions.
__attribute__((target("avx512f"))) inline float simplex_threshold_pairwise_avx512(__m512 a, int64_t m) {
  const __mmask16 valid = lanes16(0, m);
  const __m512 zero = _mm512_setzero_ps(), one = _mm512_set1_ps(1.0f);
  __m512 k0 = zero, k1 = zero, s0 = zero, s1 = zero;  // two chains of adds, even and odd j
  auto add = [&](int64_t j, __m512& k, __m512& s) __attribute__((target("avx512f"))) {
    const __m512 t = _mm512_permutexvar_ps(_mm512_set1_epi32(static_cast<int32_t>(j)), a);
    const __mmask16 ge = _mm512_mask_cmp_ps_mask(valid, t, a, _CMP_GE_OQ);
    k = _mm512_mask_add_ps(k, ge, k, one);
    s = _mm512_mask_add_ps(s, ge, s, t);
  };
  int64_t j = 0;
  for (; j + 2 <= m; j += 2) {
    add(j, k0, s0);
    add(j + 1, k1, s1);
  }
  if (j < m) add(j, k0, s0);
  const __m512 count = _mm512_add_ps(k0, k1), sum = _mm512_add_ps(s0, s1);
  const __mmask16 in = _mm512_mask_cmp_ps_mask(valid, _mm512_add_ps(one, _mm512_mul_ps(count, a)), sum, _CMP_GT_OQ);
  return (_mm512_mask_reduce_add_ps(in, a) - 1.0f) / static_cast<float>(__builtin_popcount(in));
}

// Sparsemax, P_simplex((z - max) * scale), of the unmasked float rows [0, rows) of x (each of
// d <= kSparsemaxRegisterD values) into y, each row checked as in softmax_rows_avx512. After
// the check, the row stays in at most four registers from its load to its store, and its
// threshold is Michelot's (michelot_threshold_avx512) from the values above -1, the only ones
// that can reach the support: on 30-50 wide rows the compaction, padding and calls per row of
// project_simplex_row cost more than the threshold itself.
__attribute__((target("avx512f"))) inline void sparsemax_rows_avx512(const float* x, float* y, int64_t rows, int64_t d,
                                                                     float scale, float limit, bool& non_finite,
                                                                     bool& overflow) {
  constexpr int kRegs = kThresholdRegisters;
  const int regs = static_cast<int>((d + 15) / 16);
  const __m512 zero = _mm512_setzero_ps(), c = _mm512_set1_ps(scale);
  __mmask16 lanes[kRegs];
  for (int k = 0; k < kRegs; ++k) lanes[k] = k < regs ? lanes16(16 * k, d) : __mmask16(0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = x + r * d;
    float* out = y + r * d;
    float shift;
    if (!checked_row_max_avx512(z, d, limit, shift, non_finite, overflow)) continue;
    const __m512 s = _mm512_set1_ps(shift);
    __m512 v[kRegs];
    for (int k = 0; k < kRegs; ++k) v[k] = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes[k], z + 16 * k), s), c);
    const __m512 t = _mm512_set1_ps(michelot_threshold_avx512(v, lanes, -1.0f));  // -1: compact_above's floor
    for (int k = 0; k < regs; ++k) _mm512_mask_storeu_ps(out + 16 * k, lanes[k], _mm512_max_ps(_mm512_sub_ps(v[k], t), zero));
  }
}

#endif

}  // namespace regattn
