// fusedmax in 16 float lanes on x86-64 CPUs with AVX-512F (chosen at run time, as the paths of
// avx512_rows.h), for unmasked rows of any length: the passes of prox_tv1d_row and
// project_simplex_row (row_algorithms.h) that are loops over the whole row, fused and run as
// masked vector steps; the windows of prox_tv1d_row's failing edges are solved by the same
// scalar code (tv1d_solve_windows).
#pragma once

#include <cstdint>
#include <vector>

#include "row_algorithms.h"

#ifdef REGATTN_HAVE_AVX2_POWERS
#include <immintrin.h>
#endif

namespace regattn {

#ifdef REGATTN_HAVE_AVX2_POWERS
// Per-thread scratch of fusedmax_rows_avx512 for rows of up to `room` values, with 16 entries
// to spare in every buffer: v, z and the guessed duals are stored a whole vector at a time, and
// so are the compressed lists (failing edges, candidates). The buffers differ in length (kPad
// more for the candidates), so whether they hold a row of d values is asked of `room`, never
// of one buffer's size: a test on v's size once let rows up to kPad values longer than the
// last resize write past the end of the others.
struct FusedScratchAvx512 {
  std::vector<float> v, z, candidates;
  std::vector<int32_t> local;
  TvScratch<float> tv;
  int64_t room = 0;

  static FusedScratchAvx512& for_thread(int64_t d) {
    thread_local FusedScratchAvx512 s;
    if (d > s.room) {
      for (auto* b : {&s.v, &s.z, &s.candidates}) b->resize(d + 16 + kPad);
      s.local.resize(d + 16);
      s.tv.resize(d + 16);
      s.room = d;
    }
    return s;
  }
};

// fusedmax, P_simplex(prox_TV(v; lam)) with v = (x - max) / gamma (Prop. 2), of the unmasked
// float rows [0, rows) of x (each of d values) into y and their segment ids into group, each
// row checked as in softmax_rows_avx512. The same values as the portable fusedmax_rows path,
// which runs prox_tv1d_row and project_simplex_row one after the other, bit for bit up to the
// threshold's sums (their order differs):
//   1. v, prox_tv1d_row's guess (u_e = lam sign(v_{e+1} - v_e), z_i = v_i - u_{i-1} + u_i; the
//      lane of u_{i-1} comes from the previous vector by valignd) in one pass;
//   2. the edges where the guess fails (tv1d_edge_holds), compressed into their list, which
//      tv1d_solve_windows solves (or Condat's algorithm the whole row, as prox_tv1d_row);
//   3. the projection of z: its max, the candidates above max - 1 compressed, their threshold
//      by pairwise comparisons (up to 16 candidates, the usual case), else Michelot's passes in
//      registers (michelot_threshold_avx512; in memory past 64 candidates), and y.
// Segment ids are written only on the support, the only ones the backward pass reads
// (grouped_simplex_jvp_row), with -1 elsewhere: a position's id is the first position of its
// segment. Two neighbours are in one segment iff their values are equal: a segment is written
// from one value, and every edge between segments holds strictly (the windows' own two-value
// closed form already joins by equality; adjacent segments of Condat's algorithm equal to
// rounding, a degenerate tie, are joined too). So the ids cost a running max in the output
// pass, where prox_tv1d_row counts the segments over the whole row.
__attribute__((target("avx512f"))) inline void fusedmax_rows_avx512(const float* x, float* y, int32_t* group,
                                                                    int64_t rows, int64_t d, float scale, float lam,
                                                                    float limit, bool& non_finite, bool& overflow) {
  FusedScratchAvx512& s = FusedScratchAvx512::for_thread(d);
  float* v = s.v.data();
  float* z = s.z.data();
  float* candidates = s.candidates.data();
  float* jump = s.tv.jump.data();
  int32_t* failing = s.tv.failing.data();
  int32_t* local = s.local.data();
  const __m512 zero = _mm512_setzero_ps(), c = _mm512_set1_ps(scale), up = _mm512_set1_ps(lam),
               down = _mm512_set1_ps(-lam);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const int64_t n = d;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = y + r * d;
    int32_t* gr = group + r * d;
    float shift;
    if (!checked_row_max_avx512(xr, d, limit, shift, non_finite, overflow)) continue;
    const __m512 sh = _mm512_set1_ps(shift);
    // 1. and 2. in one pass: v, the guessed duals and z of the lanes at k, and the failing edges
    // of the lanes at k - 16, whose right neighbours' z come from both vectors by valignd (a
    // load of what was just stored, across two stores, would wait for them to reach memory);
    // `right` holds the lanes i with an edge (i, i + 1)
    __m512 u_before = zero, z_before = zero;
    int64_t failures = 0;
    for (int64_t k = 0;; k += 16) {
      __m512 u = zero, zi = zero;  // past the row: the last vector's edges lie within it
      if (k < n) {
        const __mmask16 m = lanes16(k, n), right = lanes16(k + 1, n);
        const __m512 vi = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, xr + k), sh), c);
        const __m512 vn = _mm512_mul_ps(_mm512_sub_ps(_mm512_maskz_loadu_ps(right, xr + k + 1), sh), c);
        const __m512 dx = _mm512_sub_ps(vn, vi);
        u = _mm512_mask_mov_ps(_mm512_maskz_mov_ps(_mm512_mask_cmp_ps_mask(right, dx, zero, _CMP_GT_OQ), up),
                               _mm512_mask_cmp_ps_mask(right, dx, zero, _CMP_LT_OQ), down);
        const __m512 u_left = _mm512_castsi512_ps(
            _mm512_alignr_epi32(_mm512_castps_si512(u), _mm512_castps_si512(u_before), 15));
        zi = _mm512_add_ps(_mm512_sub_ps(vi, u_left), u);
        // whole vectors (the scratch has room past n): the projection below reads z back
        // whole, and a load waits for a masked store to reach memory, not one of its size
        _mm512_storeu_ps(v + k, vi);
        _mm512_storeu_ps(jump + k, u);
        _mm512_storeu_ps(z + k, zi);
      }
      if (k > 0) {  // the edges at lanes k - 16..
        const __mmask16 edges = lanes16(k - 15, n);
        const __m512 z_right =
            _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(zi), _mm512_castps_si512(z_before), 1));
        const __mmask16 holds = _mm512_mask_cmp_ps_mask(
            edges, _mm512_mul_ps(u_before, _mm512_sub_ps(z_right, z_before)), zero, _CMP_GT_OQ);
        const __mmask16 fails = edges & ~holds;
        const __m512i at = _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(k - 16)));
        _mm512_storeu_si512(failing + failures, _mm512_maskz_compress_epi32(fails, at));
        failures += __builtin_popcount(fails);
      }
      if (k >= n) break;
      u_before = u;
      z_before = zi;
    }
    const bool whole_row = n <= 2 || !(lam > 0.0f) || 4 * failures > n;
    // (their segment ids, in `local`, are not read: see the output pass)
    if (whole_row) {
      prox_tv1d_condat_row(v, z, local, n, lam);
    } else {
      tv1d_solve_windows(v, z, local, n, lam, failing, failures, s.tv);
    }
    // 3. the projection: z's max, the candidates, the threshold, y and the support's ids
    __m512 top = _mm512_set1_ps(-__builtin_inff());
    for (int64_t k = 0; k < n; k += 16) top = _mm512_mask_max_ps(top, lanes16(k, n), top, _mm512_loadu_ps(z + k));
    const __m512 z_max = _mm512_set1_ps(_mm512_reduce_max_ps(top)), floor = _mm512_set1_ps(-1.0f);
    // the candidates, compressed into memory and, while they fit, into one register (a load
    // of the list would wait for its stores to reach memory)
    int64_t count = 0;
    __m512 first = zero;
    for (int64_t k = 0; k < n; k += 16) {
      const __m512 w = _mm512_sub_ps(_mm512_loadu_ps(z + k), z_max);
      const __mmask16 keep = _mm512_mask_cmp_ps_mask(lanes16(k, n), w, floor, _CMP_GT_OQ);
      const __m512 kept = _mm512_maskz_compress_ps(keep, w);
      const int added = __builtin_popcount(keep);
      const __mmask16 after = count < 16 ? static_cast<__mmask16>(((1u << added) - 1u) << count) : __mmask16(0);
      first = _mm512_mask_permutexvar_ps(first, after, _mm512_sub_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(count))), kept);
      _mm512_storeu_ps(candidates + count, kept);
      count += added;
    }
    float tau;
    if (count <= 16) {
      tau = simplex_threshold_pairwise_avx512(first, count);
    } else if (count <= kSparsemaxRegisterD) {
      __m512 regs[kThresholdRegisters];
      __mmask16 lanes[kThresholdRegisters];
      for (int k = 0; k < kThresholdRegisters; ++k) {
        lanes[k] = 16 * k < count ? lanes16(16 * k, count) : __mmask16(0);
        regs[k] = _mm512_maskz_loadu_ps(lanes[k], candidates + 16 * k);
      }
      tau = michelot_threshold_avx512(regs, lanes, -1.0f);  // -1: the candidates' floor
    } else {
      tau = michelot_threshold(candidates, pad_lowest(candidates, count));
    }
    const __m512 t = _mm512_set1_ps(tau);
    const __m512i outside = _mm512_set1_epi32(-1);
    // a segment's id is its first position: the last position at or before i that is not
    // fused with its left neighbour, by a running max over the lanes (four shifts, then the
    // last vector's id), with no loop over the windows' edges, whose exits and tests are
    // mispredicted
    const __m512i none = _mm512_setzero_si512();
    __m512i id_before = none;
    __m512 z_earlier = zero;
    for (int64_t k = 0; k < n; k += 16) {
      const __mmask16 m = lanes16(k, n);
      const __m512 zk = _mm512_loadu_ps(z + k);
      const __m512 yi = _mm512_max_ps(_mm512_sub_ps(_mm512_sub_ps(zk, z_max), t), zero);
      _mm512_mask_storeu_ps(yr + k, m, yi);
      const __mmask16 on = _mm512_mask_cmp_ps_mask(m, yi, zero, _CMP_GT_OQ);
      const __mmask16 fused = _mm512_mask_cmp_ps_mask(
          k > 0 ? m : static_cast<__mmask16>(m & 0xFFFE), zk,
          _mm512_castsi512_ps(_mm512_alignr_epi32(_mm512_castps_si512(zk), _mm512_castps_si512(z_earlier), 15)),
          _CMP_EQ_OQ);
      __m512i id = _mm512_maskz_mov_epi32(static_cast<__mmask16>(~fused),
                                          _mm512_add_epi32(lane, _mm512_set1_epi32(static_cast<int32_t>(k))));
      id = _mm512_max_epi32(id, _mm512_alignr_epi32(id, none, 15));
      id = _mm512_max_epi32(id, _mm512_alignr_epi32(id, none, 14));
      id = _mm512_max_epi32(id, _mm512_alignr_epi32(id, none, 12));
      id = _mm512_max_epi32(_mm512_max_epi32(id, _mm512_alignr_epi32(id, none, 8)), id_before);
      _mm512_mask_storeu_epi32(gr + k, m, _mm512_mask_mov_epi32(outside, on, id));
      id_before = _mm512_permutexvar_epi32(_mm512_set1_epi32(15), id);
      z_earlier = zk;
    }
  }
}
#endif

}  // namespace regattn
