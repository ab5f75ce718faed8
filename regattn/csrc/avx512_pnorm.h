// sq-pnorm-max's float rows in 16 lanes on x86-64 CPUs with AVX-512F, for the paper's p = 1.5
// (q = 2: every power a product), chosen at run time as the paths of avx512_rows.h. The
// iteration and the backward's constants are those of the portable rows (sq_pnorm_max_step
// and sq_pnorm_max_jvp_constants in row_algorithms.h); what changes is the data's path: on
// 30-50 wide rows the portable forward spent as much on compacting, padding, the output's
// three passes and libm's logs as on its few Halley steps, and the backward on its scalar
// tails.
#pragma once

#include <algorithm>
#include <cstdint>

#include "row_algorithms.h"

#ifdef REGATTN_HAVE_AVX2_POWERS
#include <immintrin.h>
#endif

namespace regattn {

#ifdef REGATTN_HAVE_AVX2_POWERS
// ln x in 16 lanes for x >= 0 (0 gives -inf; subnormals are exact inputs): x = 2^e m with
// m in (sqrt(1/2), sqrt(2)] (getexp and getmant, then one halving), and ln m by Cephes' logf
// polynomial in m - 1 (relative error below 1e-7 on that range), ln 2 in two parts so that
// e ln 2 is exact. The sq-pnorm-max iteration takes two logs per step: libm's logf, called
// from vector code, also spilled the rows' registers around each call.
__attribute__((target("avx512f"))) inline __m512 log16_nonnegative(__m512 x) {
  const __m512 one = _mm512_set1_ps(1.0f);
  __m512 m, e;
  split_mantissa16(x, m, e);
  const __m512 f = _mm512_sub_ps(m, one), f2 = _mm512_mul_ps(f, f);
  __m512 p = _mm512_set1_ps(7.0376836292e-2f);
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-1.1514610310e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.1676998740e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-1.2420140846e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(1.4249322787e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-1.6668057665e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(2.0000714765e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(-2.4999993993e-1f));
  p = _mm512_fmadd_ps(p, f, _mm512_set1_ps(3.3333331174e-1f));
  p = _mm512_mul_ps(_mm512_mul_ps(p, f), f2);
  p = _mm512_fmadd_ps(e, _mm512_set1_ps(-2.12194440e-4f), p);
  p = _mm512_fmadd_ps(f2, _mm512_set1_ps(-0.5f), p);
  const __m512 r = _mm512_fmadd_ps(e, _mm512_set1_ps(0.693359375f), _mm512_add_ps(f, p));
  return _mm512_mask_blend_ps(_mm512_cmp_ps_mask(x, _mm512_setzero_ps(), _CMP_EQ_OQ), r,
                              _mm512_set1_ps(-__builtin_inff()));
}

// sq-pnorm-max with p = 1.5 of the unmasked float rows [0, rows) of x (each of d <=
// kSqPnormRegisterD values) into y, each row checked as in softmax_rows_avx512 (with the
// spread limit `limit`). After the check the row x - max stays in at most four registers from
// its load to its store: each step's sums A_0..A_3 over {x - tau > 0} are masked sums and a
// popcount per register, over the whole row rather than compacted candidates (the values
// at or below -gamma, which the portable row drops first, are never above tau >= -gamma),
// and y = (x - tau)_+^2 / sum is written from the registers. A step is a chain of
// reductions, logs and divisions, whose latency, not its few operations, set the time: so
// kSqPnormRows rows iterate together (their logs in one vector, log16_nonnegative), each
// until its own iteration stops, and their chains overlap. The row's register count kRegs
// (d <= 16 kRegs) is a template argument: every step goes over exactly the row's registers.
constexpr int64_t kSqPnormRegisterD = 64;
constexpr int kSqPnormRows = 4;

template <int kRegs>
__attribute__((target("avx512f"))) inline void sq_pnorm15_rows_avx512_regs(const float* x, float* y, int64_t rows,
                                                                           int64_t d, float gamma, float limit,
                                                                           bool& non_finite, bool& overflow) {
  constexpr int G = kSqPnormRows;
  const __m512 zero = _mm512_setzero_ps();
  const float log_gamma = std::log(gamma);
  __mmask16 lanes[kRegs];
  for (int k = 0; k < kRegs; ++k) lanes[k] = lanes16(16 * k, d);
  for (int64_t r0 = 0; r0 < rows; r0 += G) {
    __m512 v[G][kRegs];
    float lo[G], hi[G], tau[G];
    unsigned valid = 0;  // bit g: row r0 + g exists and passed its check
    for (int g = 0; g < G; ++g) {
      float shift = 0.0f;
      const float* z = x + std::min(r0 + g, rows - 1) * d;
      if (r0 + g < rows && checked_row_max_avx512(z, d, limit, shift, non_finite, overflow)) valid |= 1u << g;
      const __m512 s = _mm512_set1_ps(shift);
      for (int k = 0; k < kRegs; ++k) {
        v[g][k] = (valid >> g) & 1u ? _mm512_sub_ps(_mm512_maskz_loadu_ps(lanes[k], z + 16 * k), s) : zero;
      }
      lo[g] = tau[g] = -gamma;
      hi[g] = 0.0f;
    }
    unsigned active = valid;
    for (int iter = 0; iter < 200 && active; ++iter) {
      float a0[G], a1[G], a2[G], a3[G];
      alignas(64) float logs[16];
      for (int g = 0; g < G; ++g) {  // the rows that have stopped too: no branch, their tau is kept
        const __m512 t = _mm512_set1_ps(tau[g]);
        __m512 s1 = zero, s2 = zero, s3 = zero;
        int count = 0;
        for (int k = 0; k < kRegs; ++k) {
          const __m512 dk = _mm512_sub_ps(v[g][k], t);
          const __mmask16 on = _mm512_mask_cmp_ps_mask(lanes[k], dk, zero, _CMP_GT_OQ);
          const __m512 d_on = _mm512_maskz_mov_ps(on, dk), d2 = _mm512_mul_ps(d_on, d_on);
          s1 = _mm512_add_ps(s1, d_on);
          s2 = _mm512_add_ps(s2, d2);
          s3 = _mm512_fmadd_ps(d2, d_on, s3);
          count += __builtin_popcount(on);
        }
        a0[g] = static_cast<float>(count);
        a1[g] = _mm512_reduce_add_ps(s1);
        logs[2 * g] = a2[g] = _mm512_reduce_add_ps(s2);
        logs[2 * g + 1] = a3[g] = _mm512_reduce_add_ps(s3);
      }
      _mm512_store_ps(logs, log16_nonnegative(_mm512_maskz_load_ps(__mmask16((1u << (2 * G)) - 1u), logs)));
      for (int g = 0; g < G; ++g) {
        if (((active >> g) & 1u) && !sq_pnorm_max_step(logs[2 * g], logs[2 * g + 1], a0[g], a1[g], a2[g], a3[g], 2.0f,
                                                        1.5f, log_gamma, lo[g], hi[g], tau[g])) {
          active &= ~(1u << g);
        }
      }
    }
    for (int g = 0; g < G; ++g) {
      if (!((valid >> g) & 1u)) continue;
      const __m512 t = _mm512_set1_ps(tau[g]);
      __m512 u[kRegs], total = zero;
      for (int k = 0; k < kRegs; ++k) {
        const __m512 dk = _mm512_maskz_max_ps(lanes[k], _mm512_sub_ps(v[g][k], t), zero);
        u[k] = _mm512_mul_ps(dk, dk);
        total = _mm512_add_ps(total, u[k]);
      }
      const __m512 sum = _mm512_set1_ps(_mm512_reduce_add_ps(total));
      float* out = y + (r0 + g) * d;
      for (int k = 0; k < kRegs; ++k) _mm512_mask_storeu_ps(out + 16 * k, lanes[k], _mm512_div_ps(u[k], sum));
    }
  }
}

__attribute__((target("avx512f"))) inline void sq_pnorm15_rows_avx512(const float* x, float* y, int64_t rows,
                                                                      int64_t d, float gamma, float limit,
                                                                      bool& non_finite, bool& overflow) {
  switch ((d + 15) / 16) {
    case 0:
    case 1: return sq_pnorm15_rows_avx512_regs<1>(x, y, rows, d, gamma, limit, non_finite, overflow);
    case 2: return sq_pnorm15_rows_avx512_regs<2>(x, y, rows, d, gamma, limit, non_finite, overflow);
    case 3: return sq_pnorm15_rows_avx512_regs<3>(x, y, rows, d, gamma, limit, non_finite, overflow);
    default: return sq_pnorm15_rows_avx512_regs<4>(x, y, rows, d, gamma, limit, non_finite, overflow);
  }
}

// sq_pnorm_max_jvp_row with p = 1.5 (a = sqrt(y)) of a float row of any length n, in 16 lanes
// with a masked last vector (no scalar tail): a pass for the sums, which stores a in out, and
// one for the output.
__attribute__((target("avx512f"))) inline void sq_pnorm15_jvp_row_avx512(const float* y, const float* v, float* out,
                                                                         int64_t n, float gamma) {
  const __m512 zero = _mm512_setzero_ps();
  __m512 yp = zero, sa = zero, sav = zero, sy = zero, syv = zero;
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = lanes16(k, n);
    const __m512 yi = _mm512_maskz_loadu_ps(m, y + k), vi = _mm512_maskz_loadu_ps(m, v + k);
    const __m512 a = _mm512_sqrt_ps(yi);  // 0 off the support
    _mm512_mask_storeu_ps(out + k, m, a);
    // y^p = y (y / a) on the support, 0 elsewhere (with no 0 / 0)
    const __mmask16 on = _mm512_cmp_ps_mask(yi, zero, _CMP_GT_OQ);
    yp = _mm512_fmadd_ps(yi, _mm512_maskz_div_ps(on, yi, a), yp);
    sa = _mm512_add_ps(sa, a);
    sav = _mm512_fmadd_ps(a, vi, sav);
    sy = _mm512_add_ps(sy, yi);
    syv = _mm512_fmadd_ps(yi, vi, syv);
  }
  const SqPnormJvp<float> c =
      sq_pnorm_max_jvp_constants(_mm512_reduce_add_ps(yp), _mm512_reduce_add_ps(sa), _mm512_reduce_add_ps(sav),
                                 _mm512_reduce_add_ps(sy), _mm512_reduce_add_ps(syv), gamma, 1.5f);
  const __m512 dtau = _mm512_set1_ps(c.dtau), rank_one = _mm512_set1_ps(c.rank_one), scale = _mm512_set1_ps(c.c);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 m = lanes16(k, n);
    const __m512 a = _mm512_maskz_loadu_ps(m, out + k), vi = _mm512_maskz_loadu_ps(m, v + k);
    const __m512 yi = _mm512_maskz_loadu_ps(m, y + k);
    const __m512 num = _mm512_fnmadd_ps(rank_one, yi, _mm512_mul_ps(a, _mm512_sub_ps(vi, dtau)));
    _mm512_mask_storeu_ps(out + k, m, _mm512_div_ps(num, scale));
  }
}
#endif

}  // namespace regattn
