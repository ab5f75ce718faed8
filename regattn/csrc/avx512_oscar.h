// oscarmax's float rows of up to 64 values in 16 lanes on x86-64 CPUs with AVX-512F, chosen
// at run time as the paths of avx512_rows.h. The algorithm is oscarmax_row's (row_algorithms.h):
// the candidates above oscarmax_floor, sorted, then pooled, thresholded and written on the
// support by the portable row's own code (oscarmax_from_sorted): the same operations on the
// same values, so the outputs are those of the portable row, bit for bit. What changes is the
// data's path: on 30-50 wide rows the portable row's calls (the check, the compaction, the
// fills of y and group) and its scalar sort cost more than pooling the ~10 candidates.
#pragma once

#include <cstdint>

#include "row_algorithms.h"

#ifdef REGATTN_HAVE_AVX2_POWERS
#include <immintrin.h>
#endif

namespace regattn {

// Entries past n that the buffers written by compress16 (below) hold: defined on every target,
// for the callers that size them.
constexpr int64_t kCompressSlack = 16;

#ifdef REGATTN_HAVE_AVX2_POWERS
constexpr int64_t kOscarRegisterD = 64;

// Writes the lanes of v that `keep` selects, in order, to p[0, popcount(keep)), and garbage to
// the rest of p[0, 16): compressed in a register, then stored whole, because a compress store
// to memory (vcompressps/vpcompressd with a memory destination) is several times slower on
// Intel CPUs, and the loads that read it back do not get its data forwarded. p must have 16
// writable entries (kCompressSlack past the buffers' n).
__attribute__((target("avx512f"))) inline void compress16(float* p, __mmask16 keep, __m512 v) {
  _mm512_storeu_ps(p, _mm512_maskz_compress_ps(keep, v));
}

__attribute__((target("avx512f"))) inline void compress16(int32_t* p, __mmask16 keep, __m512i v) {
  _mm512_storeu_si512(p, _mm512_maskz_compress_epi32(keep, v));
}

// Sorts the m <= 16 kRegs values of c decreasingly into sorted, with order[k] the index in c
// of sorted[k], ties in c's order: sort_decreasing's ranks (rank_i = #{j: c_j > c_i} +
// #{j < i: c_j == c_i}, a permutation), counted for 16 values at once per broadcast c_j and
// scattered to their places. c holds 16 kRegs readable values. The register count is a
// template argument, so that the vectors stay in registers (with a count known only at run
// time, the compiler kept them in arrays that it copied and zeroed per row).
template <int kRegs>
__attribute__((target("avx512f"))) inline void sort_decreasing_avx512_regs(const float* c, int64_t m, float* sorted,
                                                                           int32_t* order) {
  const __m512i one = _mm512_set1_epi32(1);
  __m512 v[kRegs];
  __m512i index[kRegs], rank[kRegs];
  for (int r = 0; r < kRegs; ++r) {
    v[r] = _mm512_loadu_ps(c + 16 * r);
    index[r] = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    index[r] = _mm512_add_epi32(index[r], _mm512_set1_epi32(16 * r));
    rank[r] = _mm512_setzero_si512();
  }
  for (int64_t j = 0; j < m; ++j) {
    const __m512 cj = _mm512_set1_ps(c[j]);
    const __m512i jv = _mm512_set1_epi32(static_cast<int32_t>(j));
    for (int r = 0; r < kRegs; ++r) {
      const __mmask16 before = _mm512_cmp_ps_mask(cj, v[r], _CMP_GT_OQ) |
                               _mm512_mask_cmp_ps_mask(_mm512_cmpgt_epi32_mask(index[r], jv), cj, v[r], _CMP_EQ_OQ);
      rank[r] = _mm512_mask_add_epi32(rank[r], before, rank[r], one);
    }
  }
  for (int r = 0; r < kRegs; ++r) {
    const __mmask16 valid = lanes16(16 * r, m);
    _mm512_mask_i32scatter_ps(sorted, valid, rank[r], v[r], 4);
    _mm512_mask_i32scatter_epi32(order, valid, rank[r], index[r], 4);
  }
}

__attribute__((target("avx512f"))) inline void sort_decreasing_avx512(const float* c, int64_t m, float* sorted,
                                                                      int32_t* order) {
  switch ((m + 15) / 16) {
    case 1: return sort_decreasing_avx512_regs<1>(c, m, sorted, order);
    case 2: return sort_decreasing_avx512_regs<2>(c, m, sorted, order);
    case 3: return sort_decreasing_avx512_regs<3>(c, m, sorted, order);
    default: return sort_decreasing_avx512_regs<4>(c, m, sorted, order);
  }
}

// oscarmax of the unmasked float rows [0, rows) of x (each of d <= kOscarRegisterD values)
// into y and group, each row checked as in softmax_rows_avx512: v = (x - max) * scale from
// the registers, its candidates (v > oscarmax_floor) gathered by compress stores with their
// positions, sorted by sort_decreasing_avx512; y and group written as vector stores of 0 and
// -1 and then the support.
__attribute__((target("avx512f"))) inline void oscarmax_rows_avx512(const float* x, float* y, int32_t* group,
                                                                    int64_t rows, int64_t d, float lam, float scale,
                                                                    float limit, bool& non_finite, bool& overflow) {
  constexpr int kRegs = kOscarRegisterD / 16;
  const int regs = static_cast<int>((d + 15) / 16);
  const __m512 zero = _mm512_setzero_ps(), c = _mm512_set1_ps(scale), floor = _mm512_set1_ps(oscarmax_floor(d, lam));
  const __m512i minus_one = _mm512_set1_epi32(-1);
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  __mmask16 lanes[kRegs];
  for (int k = 0; k < kRegs; ++k) lanes[k] = k < regs ? lanes16(16 * k, d) : __mmask16(0);
  // candidates padded to whole vectors (sort_decreasing_avx512 loads them as such)
  alignas(64) float cand[kOscarRegisterD + kCompressSlack] = {}, a[kOscarRegisterD];
  alignas(64) int32_t cand_pos[kOscarRegisterD + kCompressSlack], order[kOscarRegisterD], block[kOscarRegisterD];
  int64_t start[kOscarRegisterD];
  acc_t<float> sum[kOscarRegisterD];
  for (int64_t r = 0; r < rows; ++r) {
    const float* z = x + r * d;
    float* out = y + r * d;
    int32_t* g = group + r * d;
    float shift;
    if (!checked_row_max_avx512(z, d, limit, shift, non_finite, overflow)) continue;
    const __m512 s = _mm512_set1_ps(shift);
    int64_t m = 0;
    for (int k = 0; k < regs; ++k) {
      const __m512 v = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(lanes[k], z + 16 * k), s), c);
      const __mmask16 above = _mm512_mask_cmp_ps_mask(lanes[k], v, floor, _CMP_GT_OQ);
      compress16(cand + m, above, v);
      compress16(cand_pos + m, above, _mm512_add_epi32(iota, _mm512_set1_epi32(16 * k)));
      m += __builtin_popcount(above);
      _mm512_mask_storeu_ps(out + 16 * k, lanes[k], zero);
      _mm512_mask_storeu_epi32(g + 16 * k, lanes[k], minus_one);
    }
    sort_decreasing_avx512(cand, m, a, order);
    oscarmax_from_sorted(a, m, d, lam, cand_pos, order, block, start, sum, out, g);
  }
}

// grouped_simplex_jvp_row (the backward of oscarmax and fusedmax) of a float row of any
// length n: the zeros written and the support's positions, gradients and group ids listed (by
// compress stores of the lanes with y > 0) in one pass of 16 lanes over y, g and group with a
// masked last vector, where the portable row calls a fill and the compaction and then reads
// g and group at the support's places; then the same visit of the support. support, g_on and
// group_on hold n + kCompressSlack entries.
__attribute__((target("avx512f"))) inline void grouped_simplex_jvp_row_avx512(const float* y, const float* g, float* out,
                                                                              int64_t n, const int32_t* group,
                                                                              int32_t* support, float* g_on,
                                                                              int32_t* group_on, float* acc,
                                                                              float* count) {
  const __m512 zero = _mm512_setzero_ps();
  const __m512i iota = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  int64_t m = 0;
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 lanes = lanes16(k, n);
    const __mmask16 on = _mm512_mask_cmp_ps_mask(lanes, _mm512_maskz_loadu_ps(lanes, y + k), zero, _CMP_GT_OQ);
    _mm512_mask_storeu_ps(out + k, lanes, zero);
    compress16(support + m, on, _mm512_add_epi32(iota, _mm512_set1_epi32(static_cast<int32_t>(k))));
    compress16(g_on + m, on, _mm512_maskz_loadu_ps(lanes, g + k));
    compress16(group_on + m, on, _mm512_maskz_loadu_epi32(lanes, group + k));
    m += __builtin_popcount(on);
  }
  grouped_simplex_jvp_support(support, g_on, group_on, m, out, acc, count);
}
#endif

}  // namespace regattn
