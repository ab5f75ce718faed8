// Softmax, sparsemax and alpha-entmax in 16 float lanes on x86-64 CPUs with AVX-512F (chosen
// at run time, as the AVX2 paths of avx2_powers.h and avx2_rows.h: the extension itself is
// built for baseline x86-64). Masked loads and stores take a row's last partial vector, so a 50-wide
// attention row is four vector steps with no scalar tail; torch.softmax runs in 16 lanes on
// these CPUs, and the fused check and softmax of the CPU kernel has to as well to cost no more.
#pragma once

#include <cstdint>
#include <cstring>

#include "avx2_powers.h"
#include "entmax_threshold.h"

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
// iteration. On the usual 5-12 candidates of attention rows this is 16 broadcasts (lane
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
  // all 16 lanes broadcast, those past m as -inf, never >= a candidate: a loop of a
  // fixed count, where one of m iterations was mispredicted on leaving it, a flush that kept
  // the next row's work from overlapping this row's chain (16384x30: forward 6% faster)
  a = _mm512_mask_mov_ps(_mm512_set1_ps(-__builtin_inff()), valid, a);
  for (int64_t j = 0; j < 16; j += 2) {
    add(j, k0, s0);
    add(j + 1, k1, s1);
  }
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

// The 12-bit head and the tail of a power's exponent r (pow16: r e is head e + tail e with
// head e exact for the 8-bit exponents e).
inline void split_exponent(float r, float& head, float& tail) {
  uint32_t bits;
  std::memcpy(&bits, &r, sizeof(bits));
  bits &= 0xfffff000u;
  std::memcpy(&head, &bits, sizeof(head));
  tail = r - head;
}

// x = 2^e m with m in (1/sqrt 2, sqrt 2] for x > 0 (subnormals included): getexp and
// getmant give m in [1, 2), halved above sqrt 2; the range on which the log series of pow16
// and log16_nonnegative (avx512_pnorm.h) converge fastest.
__attribute__((target("avx512f"))) inline void split_mantissa16(__m512 x, __m512& m, __m512& e) {
  m = _mm512_getmant_ps(x, _MM_MANT_NORM_1_2, _MM_MANT_SIGN_src);
  e = _mm512_getexp_ps(x);
  const __mmask16 high = _mm512_cmp_ps_mask(m, _mm512_set1_ps(1.41421356f), _CMP_GT_OQ);
  m = _mm512_mask_mul_ps(m, high, m, _mm512_set1_ps(0.5f));
  e = _mm512_mask_add_ps(e, high, e, _mm512_set1_ps(1.0f));
}

// x^r for finite x > 0 in 16 lanes, as pow8 (avx2_powers.h) computes it: 2^(r log2 x) with
// log2 x = e + log2 m, m in [1/sqrt 2, sqrt 2), and r e split exactly (r = r_head + r_tail,
// r_head of 12 significant bits). getexp/getmant take e and m from subnormals too, the
// division of the atanh series is a reciprocal refined by one Newton step (2^-28 relative:
// m + 1 lies in [1.7, 2.5]), and scalef applies 2^n with IEEE underflow and overflow.
__attribute__((target("avx512f"))) inline __m512 pow16(__m512 x, float r, float r_head, float r_tail) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 m, e;
  split_mantissa16(x, m, e);
  const __m512 den = _mm512_add_ps(m, one);
  __m512 inv = _mm512_rcp14_ps(den);
  inv = _mm512_mul_ps(inv, _mm512_fnmadd_ps(den, inv, _mm512_set1_ps(2.0f)));
  const __m512 s = _mm512_mul_ps(_mm512_sub_ps(m, one), inv), s2 = _mm512_mul_ps(s, s);
  // log2 m = (2 / ln 2) (s + s^3/3 + s^5/5 + s^7/7 + s^9/9), |s| <= 0.172
  __m512 log2_m = _mm512_set1_ps(0.32059889797532524f);
  log2_m = _mm512_fmadd_ps(log2_m, s2, _mm512_set1_ps(0.4121985831111324f));
  log2_m = _mm512_fmadd_ps(log2_m, s2, _mm512_set1_ps(0.5770780163555854f));
  log2_m = _mm512_fmadd_ps(log2_m, s2, _mm512_set1_ps(0.9617966939259756f));
  log2_m = _mm512_fmadd_ps(log2_m, s2, _mm512_set1_ps(2.8853900817779268f));
  log2_m = _mm512_mul_ps(log2_m, s);
  const __m512 head = _mm512_mul_ps(e, _mm512_set1_ps(r_head));  // exact: 12 + 8 significant bits
  const __m512 n1 = _mm512_roundscale_ps(head, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 f = _mm512_add_ps(_mm512_sub_ps(head, n1),
                                 _mm512_fmadd_ps(e, _mm512_set1_ps(r_tail), _mm512_mul_ps(_mm512_set1_ps(r), log2_m)));
  const __m512 n2 = _mm512_roundscale_ps(f, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  const __m512 g = _mm512_mul_ps(_mm512_sub_ps(f, n2), _mm512_set1_ps(0.69314718055994531f));
  __m512 p = _mm512_set1_ps(1.0f / 5040);  // e^g, |g| <= ln(2)/2, as exp16_nonpositive
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 720));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 120));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 24));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(1.0f / 6));
  p = _mm512_fmadd_ps(p, g, _mm512_set1_ps(0.5f));
  p = _mm512_fmadd_ps(p, g, one);
  p = _mm512_fmadd_ps(p, g, one);
  return _mm512_scalef_ps(p, _mm512_add_ps(n1, n2));
}

// power_sums_avx2 (avx2_powers.h) in 16 lanes: for the a values d of `active`,
// power[k] = d^(r+1) and the sums of d^(r+1), d^r and d^(r-1) (pow16; masked lanes past a).
__attribute__((target("avx512f"))) inline void power_sums_avx512(const float* active, int64_t a, float r, float* power,
                                                                 float& s_rp1, float& s_r, float& s_rm1) {
  float r_head, r_tail;
  split_exponent(r, r_head, r_tail);
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 sum_rp1 = _mm512_setzero_ps(), sum_r = sum_rp1, sum_rm1 = sum_rp1;
  for (int64_t k = 0; k < a; k += 16) {
    const __mmask16 m = lanes16(k, a);
    const __m512 d = _mm512_mask_loadu_ps(one, m, active + k);  // 1 in the lanes past a: no 0 to divide by
    const __m512 p = _mm512_maskz_mov_ps(m, pow16(d, r, r_head, r_tail));
    const __m512 pd = _mm512_mul_ps(p, d);
    _mm512_mask_storeu_ps(power + k, m, pd);
    sum_r = _mm512_add_ps(sum_r, p);
    sum_rm1 = _mm512_add_ps(sum_rm1, _mm512_div_ps(p, d));
    sum_rp1 = _mm512_add_ps(sum_rp1, pd);
  }
  s_rp1 = _mm512_reduce_add_ps(sum_rp1);
  s_r = _mm512_reduce_add_ps(sum_r);
  s_rm1 = _mm512_reduce_add_ps(sum_rm1);
}

// alpha-entmax (entmax_halley_row) of the unmasked float rows [0, rows) of x (each of
// d <= kEntmaxRegisterD values, alpha[r] per row) into y and, with `weight` non-null, the
// backward's weights y^{2-alpha} into weight, each row checked as in softmax_rows_avx512.
// The same steps (EntmaxThresholdSearch) from the same sums, on the row held in at most four
// registers: the support at tau is a mask per register rather than a list, so a pass is the
// powers of the registers with an active lane (independent chains the CPU overlaps) and three
// reductions. The row algorithm's compactions, their stores and reloads and its scatter of
// the output were most of its time on 30-50 wide rows, its powers' latency the rest.
constexpr int64_t kEntmaxRegisterD = 64;

// The support at tau among the candidates of a register of z (`active`), and d = z - tau
// there (1 elsewhere: no 0 to divide by).
__attribute__((target("avx512f"))) inline __m512 entmax_support(__m512 z, __mmask16 candidate, __m512 tau,
                                                                __mmask16& active) {
  active = _mm512_mask_cmp_ps_mask(candidate, z, tau, _CMP_GT_OQ);
  return _mm512_mask_sub_ps(_mm512_set1_ps(1.0f), active, z, tau);
}

__attribute__((target("avx512f"))) inline void entmax_halley_rows_avx512(const float* x, float* y, float* weight,
                                                                         const float* alpha, int64_t rows, int64_t d,
                                                                         float limit, bool& non_finite,
                                                                         bool& overflow) {
  constexpr int kRegs = kEntmaxRegisterD / 16;
  const int regs = static_cast<int>((d + 15) / 16);
  const __m512 zero = _mm512_setzero_ps();
  __mmask16 lanes[kRegs];
  for (int k = 0; k < kRegs; ++k) lanes[k] = k < regs ? lanes16(16 * k, d) : __mmask16(0);
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = x + r * d;
    float shift;
    if (!checked_row_max_avx512(z, d, limit, shift, non_finite, overflow)) continue;
    EntmaxThresholdSearch<float> search(alpha[r], d);
    float r_head, r_tail;
    split_exponent(search.q - 1.0f, r_head, r_tail);
    const __m512 s = _mm512_set1_ps(shift), am1 = _mm512_set1_ps(search.am1);
    __m512 v[kRegs], power[kRegs];
    __mmask16 candidate[kRegs], active[kRegs];
    for (int k = 0; k < kRegs; ++k) {
      // z = (x - shift) (alpha - 1), as compact_above computes it; only z > -1 can be active
      v[k] = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes[k], z + 16 * k), s), am1);
      candidate[k] = _mm512_mask_cmp_ps_mask(lanes[k], v[k], _mm512_set1_ps(-1.0f), _CMP_GT_OQ);
      power[k] = zero;
    }
    bool power_at_tau = false;
    for (int pass = 0; search.open(pass); ++pass) {
      const __m512 t = _mm512_set1_ps(search.tau);
      __m512 sum_q = zero, sum_qm1 = zero, sum_qm2 = zero;
      for (int k = 0; k < kRegs; ++k) {
        const __m512 dk = entmax_support(v[k], candidate[k], t, active[k]);
        if (!active[k]) {
          power[k] = zero;
          continue;
        }
        const __m512 p = _mm512_maskz_mov_ps(active[k], pow16(dk, search.q - 1.0f, r_head, r_tail));
        power[k] = _mm512_mul_ps(p, dk);
        sum_qm1 = _mm512_add_ps(sum_qm1, p);
        sum_qm2 = _mm512_add_ps(sum_qm2, _mm512_div_ps(p, dk));
        sum_q = _mm512_add_ps(sum_q, power[k]);
      }
      power_at_tau = true;
      if (!search.step(_mm512_reduce_add_ps(sum_q), _mm512_reduce_add_ps(sum_qm1), _mm512_reduce_add_ps(sum_qm2))) {
        break;
      }
      power_at_tau = false;
    }
    float q_head, q_tail;
    split_exponent(search.q, q_head, q_tail);
    const __m512 t = _mm512_set1_ps(search.tau);
    __m512 total = zero, dk[kRegs];
    for (int k = 0; k < kRegs; ++k) {
      dk[k] = entmax_support(v[k], candidate[k], t, active[k]);
      if (!power_at_tau) power[k] = _mm512_maskz_mov_ps(active[k], pow16(dk[k], search.q, q_head, q_tail));
      total = _mm512_add_ps(total, power[k]);
    }
    const float sum = _mm512_reduce_add_ps(total);
    const __m512 sum_v = _mm512_set1_ps(sum), scale = _mm512_set1_ps(search.weight_scale(sum));
    for (int k = 0; k < regs; ++k) {
      const __m512 yk = _mm512_div_ps(power[k], sum_v);
      _mm512_mask_storeu_ps(y + r * d + 16 * k, lanes[k], yk);
      if (weight) {
        const __mmask16 positive = _mm512_cmp_ps_mask(yk, zero, _CMP_GT_OQ);
        const __m512 wk = _mm512_maskz_mul_ps(positive, _mm512_div_ps(power[k], dk[k]), scale);
        _mm512_mask_storeu_ps(weight + r * d + 16 * k, lanes[k], wk);
      }
    }
  }
}
#endif

}  // namespace regattn
