// Exact per-row algorithms behind the sort-based mappings. Each works on one contiguous
// row of `n` values (the unmasked positions of an attention row, in order) and is written
// once, for every backend that calls it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

#include "avx2_rows.h"
#include "avx512_rows.h"
#include "entmax_threshold.h"

namespace regattn {

// max(d, 0), written so that the compiler keeps it branch-free: from std::max(d, 0) followed
// by d * d it derives "store 0 if d <= 0" and emits a branch per entry, which mispredicts on
// attention rows (about half their entries change side unpredictably). Exact: d + |d| is 2d
// or 0, and halving is exact.
template <typename T>
inline T positive_part(T d) {
  return (d + std::fabs(d)) * T(0.5);
}

// 16-byte vectors (SSE2 on x86-64, NEON on arm64, scalar code elsewhere) through the GCC/Clang
// vector extension, for the reductions the compiler leaves scalar: it does not reassociate a
// running sum without -ffast-math, and it turns selects into branches.
template <typename T>
struct Vec16;
template <>
struct Vec16<float> {
  typedef float type __attribute__((vector_size(16)));
};
template <>
struct Vec16<double> {
  typedef double type __attribute__((vector_size(16)));
};
template <typename T>
using vec16_t = typename Vec16<T>::type;
template <typename T>
constexpr int64_t kLanes = 16 / sizeof(T);

template <typename T>
inline vec16_t<T> load16(const T* p) {
  vec16_t<T> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}

// max of x[0, n), n >= 1, in two vectors of lanes: the compiler, without -ffast-math, does
// not vectorize this reduction, and a single running max is a chain of n dependent
// operations, whose latency, not their count, sets the time on short rows.
template <typename T>
inline T row_max(const T* x, int64_t n) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  T m = x[0];
  int64_t i = 0;
  if (n >= 2 * W) {
    V a0 = load16(x), a1 = load16(x + W);
    for (i = 2 * W; i + 2 * W <= n; i += 2 * W) {
      const V b0 = load16(x + i), b1 = load16(x + i + W);
      a0 = b0 > a0 ? b0 : a0;
      a1 = b1 > a1 ? b1 : a1;
    }
    a0 = a1 > a0 ? a1 : a0;
    for (int64_t l = 0; l < W; ++l) m = std::max(m, a0[l]);
  }
  for (; i < n; ++i) m = std::max(m, x[i]);
  return m;
}

// sum of x[0, n), in two vectors of lanes, for the reason given at row_max (a running sum is
// a chain of n dependent additions); the order of the additions differs from a running sum.
template <typename T>
inline T row_sum(const T* x, int64_t n) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  T total = 0;
  int64_t i = 0;
  if (n >= 2 * W) {
    V a0 = load16(x), a1 = load16(x + W);
    for (i = 2 * W; i + 2 * W <= n; i += 2 * W) {
      a0 += load16(x + i);
      a1 += load16(x + i + W);
    }
    a0 += a1;
    for (int64_t l = 0; l < W; ++l) total += a0[l];
  }
  for (; i < n; ++i) total += x[i];
  return total;
}

// One pass over a row of n >= 1 values that the kernels make as they read it: its max and min
// (in two vectors of lanes each, as row_max) and whether every value is finite (x * 0 is 0
// for those and NaN for inf or NaN; the max/min comparisons skip NaN, the product does not).
// The mappings subtract the max before any threshold arithmetic (shift invariance), so the
// pass that checks the row also yields the shift, and the row algorithms need no row_max.
template <typename T>
struct RowRange {
  T max, min;
  bool finite;
};

template <typename T>
inline RowRange<T> row_range(const T* x, int64_t n) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  T hi = x[0], lo = x[0], zero = 0;
  int64_t i = 0;
  if (n >= 2 * W) {
    V h0 = load16(x), h1 = load16(x + W);
    V l0 = h0, l1 = h1, z0 = h0 * T(0), z1 = h1 * T(0);
    for (i = 2 * W; i + 2 * W <= n; i += 2 * W) {
      const V b0 = load16(x + i), b1 = load16(x + i + W);
      h0 = b0 > h0 ? b0 : h0;
      h1 = b1 > h1 ? b1 : h1;
      l0 = b0 < l0 ? b0 : l0;
      l1 = b1 < l1 ? b1 : l1;
      z0 += b0 * T(0);
      z1 += b1 * T(0);
    }
    h0 = h1 > h0 ? h1 : h0;
    l0 = l1 < l0 ? l1 : l0;
    z0 += z1;
    for (int64_t l = 0; l < W; ++l) {
      hi = std::max(hi, h0[l]);
      lo = std::min(lo, l0[l]);
      zero += z0[l];
    }
  }
  for (; i < n; ++i) {
    hi = std::max(hi, x[i]);
    lo = std::min(lo, x[i]);
    zero += x[i] * T(0);
  }
  return {hi, lo, zero == T(0)};
}

// Rows handed to the vector loops are padded with kPad entries of lowest(), which no
// threshold ever exceeds, up to a multiple of 2 vectors; scratch buffers hold n + kPad.
constexpr int64_t kPad = 8;

template <typename T>
int64_t pad_lowest(T* a, int64_t m) {
  const int64_t padded = (m + 2 * kLanes<T> - 1) / (2 * kLanes<T>) * (2 * kLanes<T>);
  std::fill(a + m, a + padded, std::numeric_limits<T>::lowest());
  return padded;
}

// Michelot's passes over the candidates (`padded` entries, see pad_lowest), in two vectors
// of lanes with masks instead of compaction: the scalar loop that compacted the list on each
// pass was a chain of dependent additions (about half the time of the whole kernel on 30-50
// wide rows); here a pass over the usual 10-20 candidates is a few vector operations. Each
// pass sums the candidates above tau, and tau = (sum - 1) / count; it stops when the set does
// not change (tau is then its exact threshold) or, by rounding, tau no longer grows. tau only
// grows and the set only shrinks, and count >= 1: v_max > tau because tau = (sum of k values
// - 1)/k < their mean <= v_max. The sums' order differs from a running sum (rounding only).
template <typename T>
T michelot_threshold(const T* candidates, int64_t padded) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  const V zero = {}, one = zero + T(1);
  T tau = std::numeric_limits<T>::lowest(), count_before = T(-1);
  for (;;) {
    const V t = zero + tau;
    V s0 = zero, s1 = zero, k0 = zero, k1 = zero;
    for (int64_t j = 0; j < padded; j += 2 * W) {
      const V a = load16(candidates + j), b = load16(candidates + j + W);
      const auto on_a = a > t, on_b = b > t;
      s0 += on_a ? a : zero;
      s1 += on_b ? b : zero;
      k0 += on_a ? one : zero;
      k1 += on_b ? one : zero;
    }
    s0 += s1;
    k0 += k1;
    T sum = 0, count = 0;
    for (int64_t l = 0; l < W; ++l) {
      sum += s0[l];
      count += k0[l];
    }
    if (count == count_before) break;  // the same set as the last pass: tau is its threshold
    const T next = (sum - T(1)) / count;
    if (!(next > tau)) break;
    tau = next;
    count_before = count;
  }
  return tau;
}

// The simplex threshold of m <= 2W candidates (`c`, padded with lowest() to two vectors of
// lanes, see pad_lowest), with no sort and no iteration: candidate i is in the support iff
// 1 + k_i c_i > S_i, with k_i the number of candidates >= c_i and S_i their sum (the sorted
// test 1 + k z_(k) > z_(1) + ... + z_(k), which holds exactly for k up to the support's size,
// read at the last rank of c_i's ties); then tau = (sum of the support - 1) / its size. The
// k_i and S_i of all lanes come from one broadcast and compare per candidate: on the usual
// 5-8 candidates of 30-50 wide rows, a fixed sequence of vector operations where Michelot's
// passes are a chain of dependent reductions and divisions, three or four deep. A padding
// lane has k = 0 and S = 0, so it fails the test.
template <typename T>
T simplex_threshold_pairwise(const T* c, int64_t m) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  const V zero = {};
  const V a = load16(c), b = load16(c + W);
  V sa = zero, sb = zero;
  auto ka = zero < zero, kb = ka;  // the counts, less the comparisons' lanes (-1 where true)
  for (int64_t j = 0; j < m; ++j) {
    const V t = zero + c[j];
    const auto at_least_a = t >= a, at_least_b = t >= b;
    ka -= at_least_a;
    kb -= at_least_b;
    sa += at_least_a ? t : zero;
    sb += at_least_b ? t : zero;
  }
  V count_a, count_b;
  for (int64_t l = 0; l < W; ++l) {
    count_a[l] = T(ka[l]);
    count_b[l] = T(kb[l]);
  }
  const V one = zero + T(1);
  const auto in_a = one + count_a * a > sa, in_b = one + count_b * b > sb;
  const V sum = (in_a ? a : zero) + (in_b ? b : zero), count = (in_a ? one : zero) + (in_b ? one : zero);
  T total = 0, size = 0;
  for (int64_t l = 0; l < W; ++l) {
    total += sum[l];
    size += count[l];
  }
  return (total - T(1)) / size;
}

// Writes v_i = (x_i - shift) * scale for the i with v_i > floor, in order, to out[0, k) and
// their positions to pos[0, k) (index[i], or i where index is null), each optional, and
// returns k: how the row algorithms gather the few values that can reach the support. out
// and pos hold n entries and may be x and index (in place). Branch-free: every value is
// stored and the write index advances by the comparison (on attention rows the comparison
// is unpredictable, and a branch on it would mispredict). Float rows take 8 AVX2 lanes where
// the CPU has them (compact_above_avx2: about a third of this loop's time; 16 AVX-512 lanes
// with vcompress measured slower, by 5-10%, on the prox's and the backward's rows).
template <typename T>
int64_t compact_above(const T* x, const int32_t* index, int64_t n, T shift, T scale, T floor, T* out, int32_t* pos) {
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    if (avx2_enabled().load(std::memory_order_relaxed)) {
      return compact_above_avx2(x, index, n, shift, scale, floor, out, pos);
    }
  }
#endif
  int64_t k = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T v = (x[i] - shift) * scale;
    const int32_t at = index ? index[i] : static_cast<int32_t>(i);
    if (out) out[k] = v;
    if (pos) pos[k] = at;
    k += v > floor;
  }
  return k;
}

// Softmax of v = (z - shift) * scale, y = e^v / sum_j e^v_j, with `shift` the row's max (so
// every exponent is <= 0: nothing overflows and the sum is at least 1) and `scale` 1/gamma.
// Float rows take 8 AVX2 lanes where the CPU has them (exp_shifted_sum_avx2), which is what
// lets the fused check and softmax of the CPU kernel cost no more than torch.softmax alone.
template <typename T>
void softmax_row(const T* z, T* y, int64_t n, T shift, T scale) {
  T total = 0;
  bool vectorized = false;
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_enabled().load(std::memory_order_relaxed)) return softmax_row_avx512(z, y, n, shift, scale);
    if (avx2_enabled().load(std::memory_order_relaxed)) {
      total = exp_shifted_sum_avx2(z, n, shift, scale, y);
      vectorized = true;
    }
  }
#endif
  if (!vectorized) {
    for (int64_t i = 0; i < n; ++i) {
      y[i] = std::exp((z[i] - shift) * scale);
      total += y[i];
    }
  }
  const T inv = T(1) / total;
  for (int64_t i = 0; i < n; ++i) y[i] *= inv;
}

// Euclidean projection onto the simplex of v = (z - shift) * scale, y = (v - tau)_+ with
// sum(y) = 1; `shift` is the row's max (so v_max = 0 and every threshold below is computed on
// numbers of the size of the scores' spread, not of their magnitude: the projection commutes
// with adding a constant) and `scale` is 1/gamma. Since y_max <= 1, tau >= v_max - 1 = -1, so
// only values above -1 can be in the support: we gather those into `candidates` (scratch of
// n + kPad entries, compact_above) and find the threshold of that (usually short) list with
// no sort: by all pairwise comparisons when it fits two vectors (simplex_threshold_pairwise),
// else by Michelot's active-set iteration (michelot_threshold). No loop here branches on the
// data: on attention rows the comparisons are unpredictable and branch mispredictions, not
// arithmetic, would dominate.
template <typename T>
void project_simplex_row(const T* z, T* y, int64_t n, T shift, T scale, T* candidates) {
  const int64_t active = compact_above(z, nullptr, n, shift, scale, T(-1), candidates, static_cast<int32_t*>(nullptr));
  const int64_t padded = pad_lowest(candidates, active);
  T tau;
  if (padded == 2 * kLanes<T>) {
    tau = simplex_threshold_pairwise(candidates, active);
  } else {
    tau = michelot_threshold(candidates, padded);
  }
  for (int64_t i = 0; i < n; ++i) y[i] = std::max((z[i] - shift) * scale - tau, T(0));
}

// prox of lam * sum_i |z_{i+1} - z_i| at x (1-D total-variation denoising), by Condat's
// direct algorithm ("A direct algorithm for 1D total variation denoising", IEEE SPL 2013):
// it follows the taut string, emitting one constant segment at a time. Every segment is
// written from a single value, so equal neighbours are bit-identical and the backward pass
// can read the groups off the output. group[i] receives the index of i's segment.
template <typename T>
void prox_tv1d_condat_row(const T* x, T* z, int32_t* group, int64_t n, T lam) {
  if (n <= 0) return;
  int64_t k = 0, k0 = 0, kminus = 0, kplus = 0;
  int32_t segment = 0;
  T umin = lam, umax = -lam;
  T vmin = x[0] - lam, vmax = x[0] + lam;
  auto emit = [&](int64_t last, T value) {
    do {
      z[k0] = value;
      group[k0] = segment;
      ++k0;
    } while (k0 <= last);
    ++segment;
  };
  for (;;) {
    while (k == n - 1) {  // reached the end of the row: close the pending segment(s)
      // In exact arithmetic a jump here always leaves positions to restart from; rounding
      // (e.g. inputs tied at multiples of lam) can make it cover the last position: then every
      // output is written, and restarting would read past the row.
      if (umin < T(0)) {
        emit(kminus, vmin);
        if (k0 == n) return;
        k = kminus = k0;
        vmin = x[k];
        umin = lam;
        umax = vmin + umin - vmax;
      } else if (umax > T(0)) {
        emit(kplus, vmax);
        if (k0 == n) return;
        k = kplus = k0;
        vmax = x[k];
        umax = -lam;
        umin = vmax + umax - vmin;
      } else {
        vmin += umin / T(k - k0 + 1);
        emit(k, vmin);
        return;
      }
    }
    umin += x[k + 1] - vmin;
    if (umin < -lam) {  // negative jump: the segment ends at kminus
      emit(kminus, vmin);
      k = kminus = kplus = k0;
      vmin = x[k];
      vmax = vmin + T(2) * lam;
      umin = lam;
      umax = -lam;
      continue;
    }
    umax += x[k + 1] - vmax;
    if (umax > lam) {  // positive jump: the segment ends at kplus
      emit(kplus, vmax);
      k = kminus = kplus = k0;
      vmax = x[k];
      vmin = vmax - T(2) * lam;
      umin = lam;
      umax = -lam;
      continue;
    }
    ++k;
    if (umin >= lam) {
      kminus = k;
      vmin += (umin - lam) / T(kminus - k0 + 1);
      umin = lam;
    }
    if (umax <= -lam) {
      kplus = k;
      vmax += (umax + lam) / T(kplus - k0 + 1);
      umax = -lam;
    }
  }
}

// Scratch of prox_tv1d_row (and of fusedmax_rows_avx512), sized for rows of up to n values.
template <typename T>
struct TvScratch {
  std::vector<T> jump, fails, window_in;
  std::vector<int32_t> failing, boundary, window_start, window_end;

  void resize(int64_t n) {
    if ((int64_t)jump.size() >= n) return;
    for (auto* v : {&jump, &fails, &window_in}) v->resize(n);
    for (auto* v : {&failing, &boundary, &window_start, &window_end}) v->resize(n);
  }
};

// Whether the guessed or solved z of prox_tv1d_row satisfies edge e's optimality condition: z
// jumps on edge e strictly in the direction of its dual u_e = jump[e].
template <typename T>
inline bool tv1d_edge_holds(const T* jump, const T* z, int64_t e) {
  return jump[e] * (z[e + 1] - z[e]) > T(0);
}

// The second half of prox_tv1d_row (see there): given the guess (z = x - D^T u with the duals
// u_e = s.jump[e] = lam sign(x_{e+1} - x_e)) and the edges where it fails (`failing`, in
// increasing order), solves those edges in windows until every edge's optimality condition
// holds. Writes the windows' values to z and their segment ids within each window to
// `local`, and leaves the final windows, disjoint and in increasing order, in
// s.window_start/window_end (positions); returns their number. Positions outside every window
// keep the guess: each is its own segment.
template <typename T>
int64_t tv1d_solve_windows(const T* x, T* z, int32_t* local, int64_t n, T lam, const int32_t* failing,
                           int64_t failures, TvScratch<T>& s) {
  const T* jump = s.jump.data();
  auto holds = [&](int64_t e) { return tv1d_edge_holds(jump, z, e); };
  int64_t windows = 0;  // stack of solved windows [window_start, window_end] (positions)
  auto solve = [&](int64_t a, int64_t c) {  // positions a..c, outer duals held
    const T first = x[a] - (a > 0 ? jump[a - 1] : T(0));
    const T last = x[c] + (c < n - 1 ? jump[c] : T(0));
    if (c == a + 1) {  // argmin 1/2 (z_a - first)^2 + 1/2 (z_c - last)^2 + lam |z_c - z_a|
      const T gap = last - first;
      const bool fused = std::abs(gap) <= T(2) * lam;
      const T step = fused ? T(0) : (gap > T(0) ? lam : -lam);
      z[a] = fused ? (first + last) / T(2) : first + step;
      z[c] = fused ? z[a] : last - step;
      local[a] = 0;
      local[c] = z[c] != z[a];  // a gap of 2 lam to rounding: no jump, one segment
      return;
    }
    const int64_t len = c - a + 1;
    T* in = s.window_in.data();
    std::copy(x + a, x + c + 1, in);
    in[0] = first;
    in[len - 1] = last;
    prox_tv1d_condat_row(in, z + a, local + a, len, lam);
  };
  for (int64_t f = 0; f < failures;) {
    int64_t a = failing[f], c = a + 1;  // the window's first and last positions
    // take in the failing edges that follow (their z are still the guess: failing, as listed)
    auto take_failing = [&]() {
      while (f < failures && failing[f] < c) ++f;
      while (f < failures && failing[f] == c) ++c, ++f;
    };
    take_failing();
    for (;;) {
      while (windows > 0 && s.window_end[windows - 1] >= a) a = s.window_start[--windows];
      solve(a, c);
      if (a > 0 && !holds(a - 1)) {
        --a;
        continue;
      }
      if (c + 1 < n && !holds(c)) {
        ++c;
        take_failing();
        continue;
      }
      break;
    }
    s.window_start[windows] = static_cast<int32_t>(a);
    s.window_end[windows++] = static_cast<int32_t>(c);
    // edge c was just checked; a later window re-checks it if it moves z[c + 1]
  }
  return windows;
}

// The same prox, usually faster than Condat's algorithm alone. On attention rows most
// positions end up as their own segment (random scores, lam = 0.1: about 45 segments in 50),
// and Condat's algorithm, which decides segment by segment, spends its time on mispredicted
// branches. Here a branch-free pass first guesses that every position is its own segment:
// the dual of the prox, z = x - D^T u with |u_e| <= lam (D the forward difference), is then
// u_e = lam sign(x_{e+1} - x_e) on every edge e = (e, e+1), and z_i = x_i - u_{i-1} + u_i.
// Where the guessed z jumps in the guessed direction on an edge, the guess satisfies that
// edge's optimality condition. The edges where it does not (about 6 in 50 above) are grouped
// into windows of consecutive edges, each solved with the duals of its two outer edges held
// at their guessed values: they enter as -u_{a-1} on the window's first value and +u_c on its
// last. A window of one edge (most of them) has a closed form; longer ones go to Condat's
// algorithm. Each window's outer edges are then checked against the new values and, where
// one fails, the window takes it in (merging with the window before it when they touch) and
// is solved again (tv1d_solve_windows). When no edge fails, every edge's optimality condition
// holds, so z is the prox (the problem is strongly convex: its solution is unique). Rows where
// the guess fails on many edges (large lam) go to Condat's algorithm directly. Values agree
// with prox_tv1d_condat_row to rounding.
template <typename T>
void prox_tv1d_row(const T* x, T* z, int32_t* group, int64_t n, T lam, TvScratch<T>& s) {
  if (n <= 2 || !(lam > T(0))) return prox_tv1d_condat_row(x, z, group, n, lam);
  T* jump = s.jump.data();  // u_e, the guessed dual of edge e
  for (int64_t e = 0; e + 1 < n; ++e) {
    const T dx = x[e + 1] - x[e];
    jump[e] = lam * (T(dx > T(0)) - T(dx < T(0)));  // 0 on ties: never passes the check below
  }
  z[0] = x[0] + jump[0];
  for (int64_t i = 1; i + 1 < n; ++i) z[i] = x[i] - jump[i - 1] + jump[i];
  z[n - 1] = x[n - 1] - jump[n - 2];
  // The failing edges: 1 where tv1d_edge_holds fails, in a loop that the compiler vectorizes,
  // then their list (compact_above)
  T* fails = s.fails.data();
  for (int64_t e = 0; e + 1 < n; ++e) fails[e] = tv1d_edge_holds(jump, z, e) ? T(0) : T(1);
  int32_t* failing = s.failing.data();
  const int64_t failures = compact_above(fails, nullptr, n - 1, T(0), T(1), T(0.5), static_cast<T*>(nullptr), failing);
  if (4 * failures > n) return prox_tv1d_condat_row(x, z, group, n, lam);
  // segment ids within each window go to `group`, turned into row ids below
  const int64_t windows = tv1d_solve_windows(x, z, group, n, lam, failing, failures, s);
  // row ids: the running count of segment boundaries (edges outside every window, or between
  // two segments of one), flagged first (one loop that did both was a fifth of this
  // function's time)
  int32_t* boundary = s.boundary.data();
  std::fill(boundary, boundary + n - 1, 1);
  for (int64_t w = 0; w < windows; ++w) {
    for (int64_t e = s.window_start[w]; e < s.window_end[w]; ++e) boundary[e] = group[e + 1] != group[e];
  }
  int32_t segment = 0;
  group[0] = 0;
  for (int64_t e = 0; e + 1 < n; ++e) {
    segment += boundary[e];
    group[e + 1] = segment;
  }
}

// Sorts x (length n) decreasingly into `sorted`, with order[k] the position of sorted[k]; ties
// keep their order (as torch.sort(stable=True)). Attention rows are short, and for them
// counting each value's rank, sum_j [x_j > x_i] (ties broken by position), is faster than a
// comparison sort: the O(n^2) comparisons are branch-free and vectorize, where a sort's
// branches on random data mispredict half the time.
constexpr int64_t kRankSortMax = 128;

// Longer rows: least-significant-digit radix sort, 8 bits per pass, of keys that order the
// values decreasingly as unsigned integers. It is stable, so ties keep their order as above,
// and costs O(n) per pass with no data-dependent branch (a comparison sort of 400 random
// values was 10x slower). Passes whose digit is the same for every key are skipped.
template <typename T>
struct DecreasingKey;
template <>
struct DecreasingKey<float> {
  using type = uint32_t;
};
template <>
struct DecreasingKey<double> {
  using type = uint64_t;
};

template <typename T>
void radix_sort_decreasing(const T* x, int64_t n, T* sorted, int32_t* order) {
  using Key = typename DecreasingKey<T>::type;
  constexpr int kBits = 8 * sizeof(Key);
  thread_local std::vector<Key> keys, keys_next;
  thread_local std::vector<int32_t> order_next;
  if ((int64_t)keys.size() < n) {
    keys.resize(n);
    keys_next.resize(n);
    order_next.resize(n);
  }
  Key* key = keys.data();
  Key* key_next = keys_next.data();
  int32_t* idx = order;
  int32_t* idx_next = order_next.data();
  for (int64_t i = 0; i < n; ++i) {
    const T v = x[i] + T(0);  // -0 -> +0: equal values, equal keys
    Key bits;
    std::memcpy(&bits, &v, sizeof(bits));
    // IEEE order as unsigned: flip all bits of negatives, the sign bit of the others; then
    // complement, so that larger values get smaller keys
    const Key sign = Key(1) << (kBits - 1);
    key[i] = ~((bits & sign) ? ~bits : (bits | sign));
    idx[i] = static_cast<int32_t>(i);
  }
  for (int shift = 0; shift < kBits; shift += 8) {
    int64_t count[257] = {0};
    for (int64_t i = 0; i < n; ++i) ++count[((key[i] >> shift) & 0xff) + 1];
    bool trivial = false;
    for (int d = 1; d <= 256; ++d) trivial |= count[d] == n;
    if (trivial) continue;
    for (int d = 1; d <= 256; ++d) count[d] += count[d - 1];
    for (int64_t i = 0; i < n; ++i) {
      const int64_t slot = count[(key[i] >> shift) & 0xff]++;
      key_next[slot] = key[i];
      idx_next[slot] = idx[i];
    }
    std::swap(key, key_next);
    std::swap(idx, idx_next);
  }
  if (idx != order) std::copy(idx, idx + n, order);
  for (int64_t k = 0; k < n; ++k) sorted[k] = x[order[k]];
}

template <typename T>
void sort_decreasing(const T* x, int64_t n, T* sorted, int32_t* order) {
  if (n > kRankSortMax) return radix_sort_decreasing(x, n, sorted, order);
  for (int64_t i = 0; i < n; ++i) {
    const T xi = x[i];
    int32_t rank = 0;
    for (int64_t j = 0; j < i; ++j) rank += x[j] >= xi;
    for (int64_t j = i + 1; j < n; ++j) rank += x[j] > xi;
    sorted[rank] = xi;
    order[rank] = static_cast<int32_t>(i);
  }
}

// The type that sums of T accumulate in: double for float. oscarmax's prox subtracts weights
// lam (n-1-k) from sorted scores, so its pooled blocks and the threshold's prefix sums add up
// to thousands of values of size lam n (409 at lam 0.1, d 4096): summed in float their
// rounding reached 5e-3, more than the outputs themselves (3.5e-4), where torch's reference
// (whose cumsum accumulates in double) stays within 6e-6.
template <typename T>
using acc_t = std::conditional_t<std::is_same_v<T, float>, double, T>;

// Simplex threshold of values already sorted decreasingly: tau = (sum_{k<K} a_k - 1) / K for
// the largest K with a_{K-1} > tau (the support is a prefix, so the scan stops at the first
// failure), i.e. P_simplex(a) = (a - tau)_+.
template <typename T>
T simplex_threshold_sorted(const T* a, int64_t n) {
  acc_t<T> cumsum = 0;
  T tau = a[0] - T(1);
  for (int64_t k = 0; k < n; ++k) {
    cumsum += a[k];
    const T t = static_cast<T>((cumsum - 1) / static_cast<acc_t<T>>(k + 1));
    if (!(a[k] > t)) break;
    tau = t;
  }
  return tau;
}

// Projection of `a` (length n) onto the non-increasing cone {v_1 >= ... >= v_n} by
// pool-adjacent-violators, in place. Blocks are kept as (start, sum) on caller-provided
// scratch of n entries each, the sums in acc_t<T>; block b's value is sum / length.
// block_of[i] receives the index of i's pooled block. Every block is written from one value, so pooled entries are
// bit-identical.
template <typename T>
void pav_nonincreasing(T* a, int32_t* block_of, int64_t n, int64_t* start, acc_t<T>* sum) {
  int64_t top = -1;
  for (int64_t i = 0; i < n; ++i) {
    ++top;
    start[top] = i;
    sum[top] = a[i];
    // merge while the new block's mean exceeds its left neighbour's (a violation)
    while (top > 0) {
      const int64_t len_top = i + 1 - start[top];
      const int64_t len_prev = start[top] - start[top - 1];
      if (sum[top] * len_prev <= sum[top - 1] * len_top) break;
      sum[top - 1] += sum[top];
      --top;
    }
  }
  for (int64_t b = 0; b <= top; ++b) {
    const int64_t end = b < top ? start[b + 1] : n;
    if (end - start[b] == 1) {  // a[i] is its own mean: no division (most blocks at small lam)
      block_of[start[b]] = static_cast<int32_t>(b);
      continue;
    }
    const T mean = static_cast<T>(sum[b] / static_cast<acc_t<T>>(end - start[b]));
    for (int64_t i = start[b]; i < end; ++i) {
      a[i] = mean;
      block_of[i] = static_cast<int32_t>(b);
    }
  }
}

// prox of lam * sum_{i<j} max(z_i, z_j) = lam * sum_k (n-1-k) z_[k] (values sorted
// decreasingly, k from 0): an ordered weighted sum, convex because the weights decrease.
// Sort, subtract the weights, pool adjacent violators (Zeng & Figueiredo 2014, without their
// absolute values: see mappings/oscar.py for why). Runs on the m largest of a row of n values
// (`top`, in position order; m = n for the whole row, fewer for oscarmax_row's support).
// Leaves the result in sorted order in a[0, m), non-increasing, with order[k] the index in
// `top` of a[k] and block[k] its cluster. Scratch: start, sum (m entries each).
// The prox's steps after the sort (pool_pairwise_max: a holds the m values sorted, in place)
// are shared with oscarmax_row and the float rows in AVX-512 registers (avx512_oscar.h),
// which sort otherwise.
template <typename T>
void pool_pairwise_max(T* a, int64_t m, int64_t n, T lam, int32_t* block, int64_t* start, acc_t<T>* sum) {
  for (int64_t k = 0; k < m; ++k) a[k] -= lam * T(n - 1 - k);
  pav_nonincreasing(a, block, m, start, sum);
}

template <typename T>
void prox_pairwise_max_sorted(const T* top, int64_t m, int64_t n, T lam, T* a, int32_t* order, int32_t* block,
                              int64_t* start, acc_t<T>* sum) {
  sort_decreasing(top, m, a, order);  // ties keep their order: top is in position order
  pool_pairwise_max(a, m, n, lam, block, start, sum);
}

// oscarmax's output on the support from the prox of its candidates, sorted (a, order, block
// over m values) and the threshold tau: y and group there; the caller has written 0 and -1
// everywhere (oscarmax_row with fills, the AVX-512 rows with vector stores).
template <typename T>
void oscarmax_write_support(const T* a, int64_t m, T tau, const int32_t* cand_pos, const int32_t* order,
                            const int32_t* block, T* y, int32_t* group) {
  for (int64_t k = 0; k < m; ++k) {
    if (!(a[k] > tau)) break;  // a is non-increasing: the support is a prefix
    const int32_t i = cand_pos[order[k]];
    y[i] = a[k] - tau;
    group[i] = block[k];
  }
}

// oscarmax_row's steps once its m candidates are sorted into a (with order): the prox's
// pooling, the simplex threshold, and y and group on the support (the caller has filled the
// rest). Never inlined: the AVX-512 rows (avx512_oscar.h) call it too, and inlined there it
// would be compiled with fused multiply-adds, whose different rounding split or merged
// clusters of tied scores differently from the portable row.
template <typename T>
__attribute__((noinline)) void oscarmax_from_sorted(T* a, int64_t m, int64_t n, T lam, const int32_t* cand_pos,
                                                    const int32_t* order, int32_t* block, int64_t* start,
                                                    acc_t<T>* sum, T* y, int32_t* group) {
  pool_pairwise_max(a, m, n, lam, block, start, sum);
  oscarmax_write_support(a, m, simplex_threshold_sorted(a, m), cand_pos, order, block, y, group);
}

// oscarmax_row's bound (see there): only values above it can reach the support.
template <typename T>
T oscarmax_floor(int64_t n, T lam) {
  const T reach = T(1) + lam * T(n - 1);
  // slack of a few ulps, for the rounding of the pooled means: extra candidates cost nothing
  return -reach - T(16) * std::numeric_limits<T>::epsilon() * reach;
}

// Rows with more candidates than this try oscarmax_pruned first.
constexpr int64_t kOscarPruneMin = 64;

// oscarmax on long rows, sorting only the values that can reach the support. With lam (n-1)
// large (0.01 x 399 at d = 400), oscarmax_row's bound v > v_max - 1 - lam (n-1) admits almost
// the whole row, whose sort (and pool-adjacent-violators pass) cost 10-20 softmaxes. Here the
// prox runs on the top `want` values only (S, the candidates of a histogram's buckets up to a
// cut), and a certificate decides whether that is the whole row's answer:
//  - pool-adjacent-violators is a left-to-right stack; its state after the top |S| sorted
//    values is the same in the run over S and in the run over the whole row. The rest of the
//    row (ranks |S|.., every value below S's) then merges into S's blocks only if the first block
//    of the rest, whose value is M = max_t mean(a_|S| .. a_|S|+t-1), exceeds S's last block
//    value L. We bound M from above from the histogram of the rest (counts and exact sums
//    per bucket): with
//    a_k = v_[k] - lam (n-1-k), mean(a_|S| .. a_|S|+t-1) <= UB_t / t + lam (t-1)/2
//    - lam (n-1-|S|), UB_t the bound on the sum of the t largest rest values. Within a
//    bucket, UB_t / t + lam (t-1)/2 is convex in t, so its maximum is at the bucket's ends.
//    If the bound is below L (with a margin for rounding), S's blocks and values are the
//    whole row's, bit for bit (the same operations in the same order).
//  - the threshold scan over S must stop inside S (some value of S off the support): then it
//    stops where the whole row's scan stops (the values it reads are the same).
// If either fails, the cut is lowered (4x as many values) and tried once more; then false:
// the caller sorts every candidate, as before. Values, groups and tau are those of the full
// computation; y and group are written on the support only (the caller has filled them with
// 0 and -1). floor: oscarmax_row's bound (every candidate is > floor, the n - m others
// <= floor, so their sum is at most (n - m) floor: a bound is all the certificate needs, and
// it saves a pass over the row); cand, cand_pos: the m candidates. Other scratch as
// oscarmax_row's.
template <typename T>
bool oscarmax_pruned(const T* cand, const int32_t* cand_pos, int64_t m, int64_t n, T lam, T floor, T* y,
                     int32_t* group, T* a, int32_t* order, int32_t* block, int64_t* start, acc_t<T>* sum) {
  using A = acc_t<T>;  // the certificate's sums and bounds
  constexpr int kBuckets = 128;
  thread_local std::vector<T> sel;
  thread_local std::vector<int32_t> sel_pos, bucket;
  if ((int64_t)sel.size() < m) {
    sel.resize(m);
    sel_pos.resize(m);
    bucket.resize(m);
  }
  const T width = -floor / T(kBuckets), inv_width = T(kBuckets) / -floor;  // bucket b: v in [-(b+1) width, -b width]
  const T eps = T(64) * std::numeric_limits<T>::epsilon() * (T(1) - floor);
  // each candidate's bucket, monotone in v (a larger value never gets a larger bucket), in one
  // pass that the compiler vectorizes (clamped before the conversion); then each bucket's
  // count and exact sum in one more, which serve both attempts below
  int32_t* b_of = bucket.data();
  for (int64_t j = 0; j < m; ++j) {
    b_of[j] = static_cast<int32_t>(std::min(std::max(-cand[j] * inv_width, T(0)), T(kBuckets - 1)));
  }
  int32_t count[kBuckets] = {0};
  A b_sum[kBuckets] = {0};  // exact sums, in double for float (acc_t)
  for (int64_t j = 0; j < m; ++j) {
    ++count[b_of[j]];
    b_sum[b_of[j]] += cand[j];
  }
  int64_t want = 8;
  for (int attempt = 0; attempt < 2; ++attempt, want *= 4) {
    // the cut: the first bucket at which the count up to it reaches `want`
    int64_t above = 0, cut = 0;
    while (cut < kBuckets - 1 && above + count[cut] < want) above += count[cut++];
    if (cut >= kBuckets - 2) return false;  // nearly everything: no gain
    // S: the candidates of buckets up to the cut, the largest ones (buckets are monotone):
    // those with -v inv_width < cut + 1 (cut + 1 < kBuckets - 1: the clamp does not reach
    // it), listed by compact_above as v inv_width > -(cut + 1), the same product negated
    int32_t* picked = sel_pos.data();
    const int64_t k = compact_above(cand, nullptr, m, T(0), inv_width, -T(cut + 1), static_cast<T*>(nullptr), picked);
    for (int64_t j = 0; j < k; ++j) {
      sel[j] = cand[picked[j]];
      picked[j] = cand_pos[picked[j]];
    }
    if (k < 2 || k == m) return false;
    prox_pairwise_max_sorted(sel.data(), k, n, lam, a, order, block, start, sum);
    const T tau = simplex_threshold_sorted(a, k);
    int64_t support = 0;
    while (support < k && a[support] > tau) ++support;
    if (support == k) continue;  // every value of S on the support: S may be too small
    // M, the first block value of the prox from rank `support` on, over the sorted values
    // w_t from that rank: max_t (w_1 + ... + w_t) / t + lam (t-1)/2, + lam (support - (n-1)).
    // The certificate M + lam (support - (n-1)) + eps < tau holds iff every term does, each
    // tested as S < (limit - lam (t-1)/2) t for S a bound on w_1 + ... + w_t (t > 0): with a
    // product, where a division per term (two per bucket) cost most of this function.
    const A half_lam = A(lam) / 2;
    const A limit = A(tau) - eps - A(lam) * A(support) + A(lam) * A(n - 1);
    bool below = true;
    auto term_below = [&](A bound_sum, int64_t t) { return bound_sum < (limit - half_lam * A(t - 1)) * A(t); };
    A ub_sum = 0;
    int64_t t_before = 0;
    for (int64_t j = support; j < k; ++j) {  // S's values past the support: known exactly
      ub_sum += sel[order[j]];
      ++t_before;
      below &= term_below(ub_sum, t_before);
    }
    // the rest by buckets: buckets are monotone in v, so at the end of each bucket the
    // largest rest values are the buckets so far, whose sum is known (up to rounding, in the
    // margin eps); inside a bucket the next value is bounded by the bucket's upper edge (the
    // bucket's largest value, a third update per candidate, certified no more randn rows).
    // With no branch on empty buckets (taken unpredictably): an empty one's bound is
    // lowest(), which passes, and its end repeats the bucket before it.
    auto visit = [&](int64_t c, T upper, A sum_bound) {
      below &= term_below(ub_sum + (upper + eps), t_before + 1);
      ub_sum += sum_bound;
      t_before += c;
      below &= term_below(ub_sum + eps * A(t_before), t_before);
    };
    for (int64_t b = cut + 1; b < kBuckets; ++b) {
      visit(count[b], count[b] > 0 ? -T(b) * width : std::numeric_limits<T>::lowest(), b_sum[b]);
    }
    if (n > m) visit(n - m, floor, A(floor) * A(n - m));
    if (!below) continue;
    oscarmax_write_support(a, k, tau, sel_pos.data(), order, block, y, group);
    return true;
  }
  return false;
}

// oscarmax of a row, y = P_simplex(prox_P(x)) with P(z) = lam sum_{i<j} max(z_i, z_j)
// (Prop. 2; see mappings/oscar.py). prox_P (prox_pairwise_max_sorted) sorts x decreasingly,
// subtracts the weights, a_k = x_[k] - lam (n-1-k), and pools adjacent violators. Only the
// support of y is computed, from the few largest scores, because:
//  - a pooled cluster shares one value of y, so it lies entirely on or off the support: no
//    block straddles the support's edge. Pool-adjacent-violators over the m largest values
//    (any m >= |support|) therefore gives the prox on the support exactly: its first m steps
//    are those of the run over the whole row, and no later step merges across the edge.
//  - the threshold scan over those m values stops where the whole row's scan stops: a prox
//    value just past the edge can only be lower in the shorter run (merging raises a block's
//    value), and a lower value still fails the scan's test; if every candidate is in the
//    support, the (m+1)-th value is off it (next point).
//  - which values can be in the support: the prox keeps the order, with v_[k] <= x_[k] (a
//    block's mean is at most its largest score, as the weights subtracted are >= 0) and
//    v_[0] >= a_0 = v_max - lam (n-1); since y <= 1, tau >= v_[0] - 1. So y_i > 0 needs
//    v_i > v_max - 1 - lam (n-1): usually a handful of positions, to sort instead of n.
// `y` and `group` receive n values: the cluster's index on the support, -1 off it (the
// backward pass reads only the support; the clusters of the zeros are not computed).
// Scratch of n entries each: cand, a (T); sum (acc_t<T>); cand_pos, order, block (int32); start
// (int64).
template <typename T>
void oscarmax_row(const T* x, T* y, int32_t* group, int64_t n, T lam, T shift, T scale, T* cand,
                  int32_t* cand_pos, T* a, int32_t* order, int32_t* block, int64_t* start, acc_t<T>* sum) {
  // on v = (x - shift) * scale, v_max = 0 (shift is the row's max, scale 1/gamma): prox_P
  // commutes with adding a constant (mappings/oscar.py), and working at v_max = 0 keeps the
  // threshold arithmetic at the size of the scores' spread
  const T floor = oscarmax_floor(n, lam);
  const int64_t m = compact_above(x, nullptr, n, shift, scale, floor, cand, cand_pos);
  std::fill(y, y + n, T(0));
  std::fill(group, group + n, int32_t(-1));
  if (m > kOscarPruneMin && oscarmax_pruned(cand, cand_pos, m, n, lam, floor, y, group, a, order, block, start, sum)) {
    return;
  }
  sort_decreasing(cand, m, a, order);  // ties keep their order: cand is in position order
  oscarmax_from_sorted(a, m, n, lam, cand_pos, order, block, start, sum, y, group);
}

// entmax15_row's Newton iteration on its candidates (`padded` entries, see pad_lowest), from
// tau <= tau* to tau*. Each pass sums over the active set A = {v > tau} in two vectors of
// lanes, branch-free.
template <typename T>
void entmax15_newton(const T* candidates, int64_t padded, T& tau) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  const V zero = {}, one = zero + T(1), inf = zero + std::numeric_limits<T>::infinity();
  for (int iter = 0; iter < 100; ++iter) {
    V s1[2] = {zero, zero}, s2[2] = {zero, zero}, count[2] = {zero, zero}, d_min[2] = {inf, inf};
    for (int64_t j = 0; j < padded; j += 2 * W) {
      for (int h = 0; h < 2; ++h) {
        const V d = load16(candidates + j + h * W) - tau;
        const auto on = d > zero;
        const V d_on = on ? d : zero;
        s1[h] += d_on;
        s2[h] += d_on * d_on;
        count[h] += on ? one : zero;
        d_min[h] = (on & (d < d_min[h])) ? d : d_min[h];
      }
    }
    const V s1v = s1[0] + s1[1], s2v = s2[0] + s2[1], kv = count[0] + count[1];
    const V dv = d_min[0] < d_min[1] ? d_min[0] : d_min[1];
    T sum1 = 0, sum2 = 0, k = 0, dmin = std::numeric_limits<T>::infinity();
    for (int64_t l = 0; l < W; ++l) {
      sum1 += s1v[l];
      sum2 += s2v[l];
      k += kv[l];  // >= 1: tau <= tau* < v_max
      dmin = std::min(dmin, dv[l]);
    }
    const T mean = sum1 / k;
    const T delta = T(1) / k - (sum2 / k - mean * mean);
    const T t = mean - std::sqrt(std::max(delta, T(0)));
    if (delta >= T(0) && t <= dmin) {
      tau += t;
      break;
    }
    const T step = (sum2 - T(1)) / (T(2) * sum1);  // Newton: F(tau) = s2 - 1, F'(tau) = -2 s1
    if (!(step > T(0))) break;  // at tau* to float resolution
    tau += step;
  }
}

// Exact 1.5-entmax of a row: y = (v - tau)_+^2 with v = x/2 and sum(y) = 1, i.e. tau is the
// root of the convex, decreasing F(tau) = sum_i (v_i - tau)_+^2 - 1. As y_max <= 1,
// tau >= v_max - 1 =: tau_0, and only values above tau_0 can be in the support: those are
// gathered into `candidates` (scratch of n + kPad entries). From any tau <= tau*, the active set
// A = {v > tau} contains the support, and the quadratic sum_A (v_i - t)^2 = 1 has a closed-form
// root t_A = tau + mean(d) - sqrt(1/|A| - var(d)), d = v_A - tau (the sort-based formula of
// entmax15_rows_by_sort). If t_A lies below every v in A, F(t_A) = 0, so t_A = tau* exactly.
// Otherwise A still holds values outside the support, and a Newton step on F (which stays
// below tau*, F being convex) shrinks it. No sort: a few passes over the candidates.
template <typename T>
void entmax15_row(const T* x, T* y, int64_t n, T shift, T* candidates) {
  // v = (x - shift) / 2 with shift the row's max, so v_max = 0 (see project_simplex_row);
  // times 1/2 is exactly over 2
  const int64_t m = compact_above(x, nullptr, n, shift, T(0.5), T(-1), candidates, static_cast<int32_t*>(nullptr));
  T tau = T(-1);
  entmax15_newton(candidates, pad_lowest(candidates, m), tau);
  for (int64_t i = 0; i < n; ++i) {
    const T d = positive_part((x[i] - shift) / T(2) - tau);
    y[i] = d * d;
  }
}


// power_sums_avx512 or power_sums_avx2 where the CPU has them, for float rows; false where
// the caller's loop runs.
template <typename T>
bool power_sums_vectorized(T* active, int64_t a, T r, T* power, T& s_rp1, T& s_r, T& s_rm1) {
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    if (avx512_enabled().load(std::memory_order_relaxed)) {
      power_sums_avx512(active, a, r, power, s_rp1, s_r, s_rm1);
      return true;
    }
    if (avx2_enabled().load(std::memory_order_relaxed)) {
      power_sums_avx2(active, a, r, power, s_rp1, s_r, s_rm1);
      return true;
    }
  }
#endif
  return false;
}

// alpha-entmax of a row for any alpha > 1: y = [(alpha-1) x - tau]_+^{1/(alpha-1)}, sum 1,
// tau by EntmaxThresholdSearch. Only values above -1 can be in the support: the iterations
// run over those (`candidates`, with their `position`s; `power`, `active`, `active_position`:
// scratch; each n entries, `power` and `active` n + kPad), dropping the ones that fall below
// the bracket. The output is normalized to sum to 1.
//
// With `weight` non-null, it also receives the backward pass's weights w = y^{2-alpha} (0 off
// the support) at no call to pow: with u = (z - tau)_+^q and S = sum(u), y = u / S, and
// y^{2-alpha} = u^{(2-alpha) q} / S^{2-alpha} = u^{q-1} S^{alpha-2} = (u / (z - tau)) S^{alpha-2}.
template <typename T>
void entmax_halley_row(const T* x, T* y, int64_t n, T alpha, T shift, T* candidates, int32_t* position, T* power,
                       T* active, int32_t* active_position, T* weight = nullptr) {
  EntmaxThresholdSearch<T> search(alpha, n);
  const T q = search.q;
  // z = (x - shift) (alpha - 1) with shift the row's max: z_max = 0 (see project_simplex_row)
  int64_t m = compact_above(x, nullptr, n, shift, search.am1, T(-1), candidates, position);
  // Each pass first lists the support at tau, d = z - tau > 0 (`active`, with positions), by
  // branch-free compaction, then takes the powers over that list with no branch: about half
  // the candidates are in the support, unpredictably, and a branch per candidate would
  // mispredict half the time. power[k] = active[k]^q, kept from the last pass when that pass
  // was at the final tau (the usual exit), which saves the output pass its calls to pow.
  int64_t a = 0;
  T dropped = T(-1);  // every candidate lies above it
  auto list_active = [&]() {
    // candidates at or below lo stay inactive for every tau left in [lo, hi]: drop them
    // (when lo has moved: it stays at -1 while the first steps climb from there)
    if (search.lo > dropped) {
      m = compact_above(candidates, position, m, T(0), T(1), search.lo, candidates, position);
    }
    dropped = search.lo;
    a = compact_above(candidates, position, m, search.tau, T(1), T(0), active, active_position);
  };
  bool power_at_tau = false;
  for (int pass = 0; search.open(pass); ++pass) {
    list_active();
    T s_q = 0, s_qm1 = 0, s_qm2 = 0;  // sum d^q, d^{q-1}, d^{q-2} over the support
    if (!power_sums_vectorized(active, a, q - T(1), power, s_q, s_qm1, s_qm2)) {
      for (int64_t k = 0; k < a; ++k) {
        const T d = active[k];
        const T p = std::pow(d, q - T(1));
        s_qm1 += p;
        s_qm2 += p / d;
        power[k] = p * d;
        s_q += power[k];
      }
    }
    power_at_tau = true;
    if (!search.step(s_q, s_qm1, s_qm2)) break;
    power_at_tau = false;
  }
  if (!power_at_tau) {
    list_active();
    for (int64_t k = 0; k < a; ++k) power[k] = std::pow(active[k], q);
  }
  const T sum = row_sum(power, a);
  std::fill(y, y + n, T(0));
  for (int64_t k = 0; k < a; ++k) y[active_position[k]] = power[k] / sum;
  if (weight) {
    std::fill(weight, weight + n, T(0));
    const T scale = search.weight_scale(sum);
    for (int64_t k = 0; k < a; ++k) {
      const int32_t i = active_position[k];
      if (y[i] > T(0)) weight[i] = power[k] / active[k] * scale;
    }
  }
}

// One step of sq_pnorm_max_row's iteration (below), from the sums A_k = sum_i (x_i - tau)_+^k
// at tau for k = q-2, q-1, q, q+1 (x shifted to x_max = 0) and the logs of the last two:
// narrows the bracket [lo, hi] by the sign of phi(tau), then moves tau by a safeguarded Halley
// step (Newton where Halley's denominator is not positive, bisection where the step leaves
// the bracket). Returns false, with tau left as it is, where tau is the root to float
// resolution: the iteration stops. Shared by the portable row (libm's logs) and the float rows
// in AVX-512 registers (avx512_pnorm.h: the logs of several rows in one vector), into which it
// must be inlined: as a call from there it cost as much as the rest of the step (the rows'
// registers saved and restored around it).
template <typename T>
__attribute__((always_inline)) inline bool sq_pnorm_max_step(T log_a_q, T log_a_qp1, T a_qm2, T a_qm1, T a_q, T a_qp1, T q, T p, T log_gamma, T& lo,
                       T& hi, T& tau) {
  const T c = (T(2) - p) / p;
  const T phi = log_a_q - c * log_a_qp1 - log_gamma;
  // phi is only known to a few ulps: past that, Newton wanders and bisection crawls
  if (std::abs(phi) <= T(8) * std::numeric_limits<T>::epsilon()) return false;
  if (phi > T(0)) lo = tau; else hi = tau;
  // with A_k' = -k A_{k-1}: phi' = -q u + r v, u = A_{q-1} / A_q, v = A_q / A_{q+1},
  // r = q (2-p), and phi'' = -q u' + r v'
  const T u = a_qm1 / a_q, v = a_q / a_qp1, r = q * (T(2) - p);
  const T dphi = -q * u + r * v;
  const T du = (q * a_qm1 * a_qm1 - (q - T(1)) * a_qm2 * a_q) / (a_q * a_q);
  const T dv = ((q + T(1)) * a_q * a_q - q * a_qm1 * a_qp1) / (a_qp1 * a_qp1);
  const T halley = T(2) * dphi * dphi - phi * (-q * du + r * dv);  // Newton where not > 0
  T next = !(dphi < T(0))  ? (lo + hi) / T(2)
           : halley > T(0) ? tau - T(2) * phi * dphi / halley
                           : tau - phi / dphi;
  if (!(next > lo && next < hi)) next = (lo + hi) / T(2);
  if (next == tau || !(hi > lo)) return false;  // converged to float resolution
  tau = next;
  return true;
}

// sq-pnorm-max of a row, argmin_{y in simplex} gamma/2 ||y||_p^2 - y.x, p in (1, 2]:
// y = u / sum(u), u_i = (x_i - tau)_+^q with q = 1/(p-1) and tau the root of
// phi(tau) = log A_q - (2-p)/p log A_{q+1} - log gamma, A_k = sum_i (x_i - tau)_+^k
// (the KKT condition sum(u) = gamma ||u||_p^{2-p} in logs), on x shifted to x_max = 0.
// tau lies in [x_max - gamma, x_max):
// phi >= 0 at the lower end and phi -> -inf at x_max. Safeguarded Halley steps from the
// lower end (sq_pnorm_max_step; Halley saves one pass of Newton's usual four or five, for
// one more sum, A_{q-2}); only values above x_max - gamma can be in the support, so the
// iterations run over those (`candidates`, scratch of n + kPad entries). For the paper's
// p = 1.5 (q = 2) the powers are products, with no call to pow (A_0 is the count of active
// values), and each step sums over the padded candidates in two vectors of lanes with masks,
// as entmax15_newton (a branch per candidate, taken unpredictably, cost more than the sums).
template <typename T>
void sq_pnorm_max_row(const T* x, T* y, int64_t n, T gamma, T p, T shift, T* candidates) {
  const T q = T(1) / (p - T(1)), log_gamma = std::log(gamma);
  const bool q_is_two = q == T(2);
  // on x - shift, shift the row's max (see project_simplex_row): x_max = 0
  const int64_t m = compact_above(x, nullptr, n, shift, T(1), -gamma, candidates, static_cast<int32_t*>(nullptr));
  const int64_t padded = pad_lowest(candidates, m);
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  const V zero = {};
  T lo = -gamma, hi = T(0), tau = lo;
  for (int iter = 0; iter < 200; ++iter) {
    T a_qm2 = 0, a_qm1 = 0, a_q = 0, a_qp1 = 0;
    if (q_is_two) {
      const V one = zero + T(1);
      V s0[2] = {zero, zero}, s1[2] = {zero, zero}, s2[2] = {zero, zero}, s3[2] = {zero, zero};
      for (int64_t j = 0; j < padded; j += 2 * W) {
        for (int h = 0; h < 2; ++h) {
          const V d = load16(candidates + j + h * W) - tau;
          const auto on = d > zero;
          const V d_on = on ? d : zero;
          const V d2 = d_on * d_on;
          s0[h] += on ? one : zero;
          s1[h] += d_on;
          s2[h] += d2;
          s3[h] += d2 * d_on;
        }
      }
      const V s0v = s0[0] + s0[1], s1v = s1[0] + s1[1], s2v = s2[0] + s2[1], s3v = s3[0] + s3[1];
      for (int64_t l = 0; l < W; ++l) {
        a_qm2 += s0v[l];
        a_qm1 += s1v[l];
        a_q += s2v[l];
        a_qp1 += s3v[l];
      }
    } else {
      for (int64_t i = 0; i < m; ++i) {
        const T d = candidates[i] - tau;
        if (d > T(0)) {
          const T pw = std::pow(d, q - T(1));
          a_qm2 += pw / d;
          a_qm1 += pw;
          a_q += pw * d;
          a_qp1 += pw * d * d;
        }
      }
    }
    if (!sq_pnorm_max_step(std::log(a_q), std::log(a_qp1), a_qm2, a_qm1, a_q, a_qp1, q, p, log_gamma, lo, hi, tau)) {
      break;
    }
  }
  if (q_is_two) {
    for (int64_t i = 0; i < n; ++i) {
      const T d = positive_part((x[i] - shift) - tau);
      y[i] = d * d;
    }
  } else {
    for (int64_t i = 0; i < n; ++i) {
      const T d = (x[i] - shift) - tau;
      y[i] = d > T(0) ? std::pow(d, q) : T(0);
    }
  }
  const T sum = row_sum(y, n);
  for (int64_t i = 0; i < n; ++i) y[i] /= sum;
}

// The per-row constants of sq_pnorm_max_jvp_row (below), out_i = (a_i (v_i - dtau) -
// rank_one y_i) / c, from its sums over the row: of y^p, a, a v, y and y v. Shared by the
// portable row and the float one in 16 lanes (avx512_pnorm.h).
template <typename T>
struct SqPnormJvp {
  T dtau, rank_one, c;
};

template <typename T>
SqPnormJvp<T> sq_pnorm_max_jvp_constants(T s_yp, T s_a, T s_av, T s_y, T s_yv, T gamma, T p) {
  const T norm_2mp = std::pow(s_yp, (T(2) - p) / p);  // ||y||_p^{2-p}
  const T c = gamma * (p - T(1)) * norm_2mp;
  const T cw2 = gamma * (T(2) - p) * norm_2mp / s_yp;
  const T k = cw2 / (c + cw2 * s_yp);
  const T sum_minv_v = s_av - k * s_y * s_yv;
  const T sum_minv_1 = s_a - k * s_y * s_y;
  const T dtau = sum_minv_v / sum_minv_1;
  return {dtau, k * (s_yv - dtau * s_y), c};
}

// Backward of sq-pnorm-max, J v for one row (J is symmetric, so this is also J^T v): the
// O(n) form of sq_pnorm_max_jvp_reference in mappings/pnorm.py. On the support the KKT system
// reads M dy + dtau 1 = v, 1.dy = 0 with M = gamma H = D + w w^T (Prop. 1), where
//   D^{-1} = diag(a) / C,  a = y^{2-p},  C = gamma (p-1) ||y||_p^{2-p},
//   w = cw b,  b = y^{p-1} = y / a,  cw^2 = gamma (2-p) ||y||_p^{2-2p}.
// Then D^{-1} w = cw y / C and w.D^{-1} w = cw^2 sum(y^p) / C, so Sherman-Morrison gives
//   M^{-1} u = (a u - k y (y.u)) / C,  k = cw^2 / (C + cw^2 sum(y^p)),
// and J v = M^{-1} v - dtau M^{-1} 1 with dtau = 1.M^{-1} v / 1.M^{-1} 1: a handful of sums,
// taken in vectors of lanes (as running sums they were chains of dependent additions). For
// the paper's p = 1.5, a = sqrt(y), with no call to pow per entry; per row, one pow:
// ||y||_p^{2-2p} = ||y||_p^{2-p} / sum(y^p).
template <typename T>
void sq_pnorm_max_jvp_row(const T* y, const T* v, T* out, int64_t n, T gamma, T p) {
  if (p == T(1.5)) {
    for (int64_t i = 0; i < n; ++i) out[i] = std::sqrt(y[i]);  // 0 off the support
  } else {
    // 0 off the support (where pow(0, 0) would give 1 for p = 2)
    for (int64_t i = 0; i < n; ++i) out[i] = y[i] > T(0) ? std::pow(y[i], T(2) - p) : T(0);
  }
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  const V zero = {};
  V yp = zero, sa = zero, sav = zero, sy = zero, syv = zero;
  int64_t i = 0;
  for (; i + W <= n; i += W) {
    const V yi = load16(y + i), a = load16(out + i), vi = load16(v + i);
    yp += yi > zero ? yi * (yi / a) : zero;  // y^p = y b
    sa += a;
    sav += a * vi;
    sy += yi;
    syv += yi * vi;
  }
  T s_yp = 0, s_a = 0, s_av = 0, s_y = 0, s_yv = 0;
  for (int64_t l = 0; l < W; ++l) {
    s_yp += yp[l];
    s_a += sa[l];
    s_av += sav[l];
    s_y += sy[l];
    s_yv += syv[l];
  }
  for (; i < n; ++i) {
    const T yi = y[i], a = out[i];
    s_yp += yi > T(0) ? yi * (yi / a) : T(0);
    s_a += a;
    s_av += a * v[i];
    s_y += yi;
    s_yv += yi * v[i];
  }
  const SqPnormJvp<T> k = sq_pnorm_max_jvp_constants(s_yp, s_a, s_av, s_y, s_yv, gamma, p);
  for (i = 0; i < n; ++i) out[i] = (out[i] * (v[i] - k.dtau) - k.rank_one * y[i]) / k.c;
}

// sum_i w_i g_i and sum_i w_i over x[0, n), in two vectors of lanes each, for the reason given
// at row_sum: as two running sums they were chains of dependent additions that took most of
// the backward passes' time.
template <typename T>
inline void weighted_sums(const T* w, const T* g, int64_t n, T& wg, T& w_sum) {
  using V = vec16_t<T>;
  constexpr int64_t W = kLanes<T>;
  wg = w_sum = 0;
  int64_t i = 0;
  if (n >= 2 * W) {
    const V zero = {};
    V p0 = zero, p1 = zero, s0 = zero, s1 = zero;
    for (; i + 2 * W <= n; i += 2 * W) {
      const V w0 = load16(w + i), w1 = load16(w + i + W);
      p0 += w0 * load16(g + i);
      p1 += w1 * load16(g + i + W);
      s0 += w0;
      s1 += w1;
    }
    p0 += p1;
    s0 += s1;
    for (int64_t l = 0; l < W; ++l) {
      wg += p0[l];
      w_sum += s0[l];
    }
  }
  for (; i < n; ++i) {
    wg += w[i] * g[i];
    w_sum += w[i];
  }
}

// Backward of the sparse mappings, J^T g for one row (all their Jacobians are symmetric):
// on the support (y > 0), with weights w_i (1 for the simplex projection, y_i^{2-alpha} for
// alpha-entmax), out_i = w_i (g_i - sum_j w_j g_j / sum_j w_j); 0 elsewhere. The weights go
// to `out` first, then weighted_jvp_row finishes in place.
enum class SupportWeight { kOne, kSqrt, kPow };  // w = 1, sqrt(y), y^{2-alpha}

template <typename T>
void weighted_jvp_row(const T* w, const T* g, T* out, int64_t n);

template <typename T, SupportWeight kWeight>
void sparse_jvp_row(const T* y, const T* g, T* out, int64_t n, T alpha) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (kWeight == SupportWeight::kOne) {
      out[i] = T(y[i] > T(0));
    } else if constexpr (kWeight == SupportWeight::kSqrt) {
      out[i] = std::sqrt(y[i]);  // 0 off the support
    } else {
      out[i] = y[i] > T(0) ? std::pow(y[i], T(2) - alpha) : T(0);
    }
  }
  weighted_jvp_row(out, g, out, n);
}

// The same with the weights given (w >= 0, 0 off the support), as alpha-entmax's forward
// pass computes them: no call to pow here. `out` may be `w`.
template <typename T>
void weighted_jvp_row(const T* w, const T* g, T* out, int64_t n) {
  T wg, w_sum;
  weighted_sums(w, g, n, wg, w_sum);
  const T mean = wg / w_sum;
  for (int64_t i = 0; i < n; ++i) out[i] = w[i] * (g[i] - mean);
}

// Backward of fusedmax/oscarmax (Prop. 3): the simplex projection's J^T g (w = 1 above),
// then averaged within each group of the prox. A group's entries share one value of y, so a
// group lies entirely on or off the support, and the average of g_i - mean over a support
// group is the group's mean of g minus mean. So only the support (usually a few entries) is
// visited after one pass that finds it (and writes the zeros elsewhere). Group ids lie in
// [0, n); `support`, `g_on`, `group_on` (n entries each), `acc` and `count` (indexed by group
// id) are scratch. The visit (grouped_simplex_jvp_support) reads the support's positions,
// gradients and group ids from lists, support[j], g_on[j] = g[support[j]] and group_on[j] =
// group[support[j]]: shared with the float rows in 16 lanes (grouped_simplex_jvp_row_avx512 in
// avx512_oscar.h), which gather them by compress stores in their pass over the whole row,
// where reading g and group at the support's places, which no hardware prefetcher
// anticipates, cost a cache miss per row on each.
template <typename T>
void grouped_simplex_jvp_support(const int32_t* support, const T* g_on, const int32_t* group_on, int64_t m, T* out,
                                 T* acc, T* count) {
  T g_sum = 0;
  for (int64_t j = 0; j < m; ++j) {
    acc[group_on[j]] = count[group_on[j]] = T(0);
    g_sum += g_on[j];
  }
  for (int64_t j = 0; j < m; ++j) {
    acc[group_on[j]] += g_on[j];
    count[group_on[j]] += T(1);
  }
  const T mean = g_sum / T(m);
  for (int64_t j = 0; j < m; ++j) out[support[j]] = acc[group_on[j]] / count[group_on[j]] - mean;
}

template <typename T>
void grouped_simplex_jvp_row(const T* y, const T* g, T* out, int64_t n, const int32_t* group, int32_t* support,
                             T* g_on, int32_t* group_on, T* acc, T* count) {
  std::fill(out, out + n, T(0));
  const int64_t m = compact_above(y, nullptr, n, T(0), T(1), T(0), static_cast<T*>(nullptr), support);
  for (int64_t j = 0; j < m; ++j) {
    g_on[j] = g[support[j]];
    group_on[j] = group[support[j]];
  }
  grouped_simplex_jvp_support(support, g_on, group_on, m, out, acc, count);
}

}  // namespace regattn
