// Exact per-row algorithms behind the sort-based mappings. Each works on one contiguous
// row of `n` values (the unmasked positions of an attention row, in order) and is written
// once, for every backend that calls it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace regattn {

// Euclidean projection onto the simplex, y = (z - tau)_+ with sum(y) = 1. Since y_max <= 1,
// tau >= z_max - 1, so only values above z_max - 1 can be in the support: we gather those
// into `candidates` (scratch of n entries) and run Michelot's active-set iteration on them:
// tau only grows and the active set only shrinks, so it stops at the exact threshold after
// a few passes over the (usually short) candidate list, with no sort.
// The loops below are written without data-dependent branches (compaction by advancing the
// write index with a comparison): on attention rows the comparisons are unpredictable and
// branch mispredictions, not arithmetic, would dominate.
template <typename T>
void project_simplex_row(const T* z, T* y, int64_t n, T* candidates) {
  T z_max = z[0];
  for (int64_t i = 1; i < n; ++i) z_max = std::max(z_max, z[i]);
  const T floor = z_max - T(1);
  int64_t active = 0;
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const bool keep = z[i] > floor;
    candidates[active] = z[i];
    sum += keep ? z[i] : T(0);
    active += keep;
  }
  T tau = (sum - T(1)) / T(active);
  for (;;) {
    T s = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < active; ++i) {
      const T c = candidates[i];
      const bool keep = c > tau;
      candidates[count] = c;  // compact: dropped values never return
      s += keep ? c : T(0);
      count += keep;
    }
    // count >= 1: z_max > tau because tau = (sum of k values - 1)/k < their mean <= z_max
    const T next = (s - T(1)) / T(count);
    const bool done = count == active || !(next > tau);
    active = count;
    if (done) break;
    tau = next;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = std::max(z[i] - tau, T(0));
}

// prox of lam * sum_i |z_{i+1} - z_i| at x (1-D total-variation denoising), by Condat's
// direct algorithm ("A direct algorithm for 1D total variation denoising", IEEE SPL 2013):
// it follows the taut string, emitting one constant segment at a time. Every segment is
// written from a single value, so equal neighbours are bit-identical and the backward pass
// can read the groups off the output. group[i] receives the index of i's segment.
template <typename T>
void prox_tv1d_row(const T* x, T* z, int64_t* group, int64_t n, T lam) {
  if (n <= 0) return;
  int64_t k = 0, k0 = 0, kminus = 0, kplus = 0, segment = 0;
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
      if (umin < T(0)) {
        emit(kminus, vmin);
        k = kminus = k0;
        vmin = x[k];
        umin = lam;
        umax = vmin + umin - vmax;
      } else if (umax > T(0)) {
        emit(kplus, vmax);
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

// Projection of `a` (length n) onto the non-increasing cone {v_1 >= ... >= v_n} by
// pool-adjacent-violators, in place. Blocks are kept as (start, sum) on caller-provided
// scratch of n entries each; block b's value is sum / length. block_of[i] receives the index
// of i's pooled block. Every block is written from one value, so pooled entries are
// bit-identical.
template <typename T>
void pav_nonincreasing(T* a, int64_t* block_of, int64_t n, int64_t* start, T* sum) {
  int64_t top = -1;
  for (int64_t i = 0; i < n; ++i) {
    ++top;
    start[top] = i;
    sum[top] = a[i];
    // merge while the new block's mean exceeds its left neighbour's (a violation)
    while (top > 0) {
      const int64_t len_top = i + 1 - start[top];
      const int64_t len_prev = start[top] - start[top - 1];
      if (sum[top] * T(len_prev) <= sum[top - 1] * T(len_top)) break;
      sum[top - 1] += sum[top];
      --top;
    }
  }
  for (int64_t b = 0; b <= top; ++b) {
    const int64_t end = b < top ? start[b + 1] : n;
    const T mean = sum[b] / T(end - start[b]);
    for (int64_t i = start[b]; i < end; ++i) {
      a[i] = mean;
      block_of[i] = b;
    }
  }
}

// Exact 1.5-entmax of a row: y = (x/2 - tau)_+^2 with sum(y) = 1. `sorted` is scratch of
// n entries. For the k largest values v = x/2 the threshold solves
// sum_{i<=k} (v_i - tau)^2 = 1 in closed form; the support is the largest k whose threshold
// lies below v_(k). As y_max <= 1, tau >= v_max - 1: only values above that are sorted.
template <typename T>
void entmax15_row(const T* x, T* y, int64_t n, T* sorted) {
  T v_max = x[0] / T(2);
  for (int64_t i = 1; i < n; ++i) v_max = std::max(v_max, x[i] / T(2));
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {  // branch-free compaction, as in project_simplex_row
    sorted[m] = x[i] / T(2);
    m += sorted[m] > v_max - T(1);
  }
  std::sort(sorted, sorted + m, [](T a, T b) { return a > b; });
  T s1 = 0, s2 = 0, tau = v_max - T(1);
  for (int64_t k = 1; k <= m; ++k) {
    const T v = sorted[k - 1];
    s1 += v;
    s2 += v * v;
    const T mean = s1 / T(k);
    T delta = mean * mean - s2 / T(k) + T(1) / T(k);
    if (delta < T(0)) delta = T(0);
    const T tau_k = mean - std::sqrt(delta);
    if (tau_k > v) break;  // v would get weight <= 0: the support has k-1 entries
    tau = tau_k;
  }
  for (int64_t i = 0; i < n; ++i) {
    const T d = std::max(x[i] / T(2) - tau, T(0));
    y[i] = d * d;
  }
}

// Backward of the sparse mappings, J^T g for one row (all their Jacobians are symmetric):
// on the support (y > 0), with weights w_i (1 for the simplex projection, y_i^{2-alpha} for
// alpha-entmax), out_i = w_i (g_i - sum_j w_j g_j / sum_j w_j); 0 elsewhere.
// With groups (fusedmax/oscarmax, Prop. 3) the result is then averaged within each group;
// `acc` and `count` are scratch of n entries, group ids lie in [0, n).
// alpha-entmax of a row for any alpha > 1: y = [(alpha-1) x - tau]_+^{1/(alpha-1)}, sum 1.
// With z = (alpha-1) x and q = 1/(alpha-1), tau is the root of F(tau) = ||(z - tau)_+||_q - 1,
// which decreases in tau, with F >= 0 at z_max - 1 and F <= 0 at z_max - n^{1-alpha}. F is
// the q-norm of a convex vector function, convex for q >= 1 (alpha <= 2), and nearly linear
// (exactly so while one value is active), so Newton's method from the bracket's lower end
// climbs to the root without overshooting in a few steps, where Newton on sum (z-tau)^q - 1
// would crawl for large q. Steps that leave the bracket (alpha > 2) fall back to bisection.
// Only values above z_max - 1 can be in the support: the iterations run over those
// (`candidates`, scratch of n entries). The output is normalized to sum to 1 exactly.
template <typename T>
void entmax_bisect_row(const T* x, T* y, int64_t n, T alpha, T* candidates) {
  const T am1 = alpha - T(1), q = T(1) / am1;
  T z_max = x[0] * am1;
  for (int64_t i = 1; i < n; ++i) z_max = std::max(z_max, x[i] * am1);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    candidates[m] = x[i] * am1;
    m += candidates[m] > z_max - T(1);
  }
  T lo = z_max - T(1), hi = z_max - std::pow(T(n), -am1);
  T tau = lo;
  for (int iter = 0; iter < 100 && hi > lo; ++iter) {
    T s_q = 0, s_qm1 = 0;  // sum d^q and sum d^{q-1} over the support, d = z - tau
    for (int64_t i = 0; i < m; ++i) {
      const T d = candidates[i] - tau;
      if (d > T(0)) {
        const T p = std::pow(d, q - T(1));
        s_qm1 += p;
        s_q += p * d;
      }
    }
    const T norm = std::pow(s_q, T(1) / q);
    const T f = norm - T(1);
    // f is only known to a few ulps: past that, Newton wanders and bisection crawls
    if (std::abs(f) <= T(8) * std::numeric_limits<T>::epsilon()) break;
    if (f > T(0)) lo = tau; else hi = tau;
    // F'(tau) = -s_qm1 * s_q^{1/q - 1} = -s_qm1 * norm / s_q
    T next = s_qm1 > T(0) ? tau + f * s_q / (s_qm1 * norm) : (lo + hi) / T(2);
    if (!(next > lo && next < hi)) next = (lo + hi) / T(2);
    if (next == tau) break;  // converged to float resolution
    tau = next;
  }
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T d = x[i] * am1 - tau;
    y[i] = d > T(0) ? std::pow(d, q) : T(0);
    sum += y[i];
  }
  for (int64_t i = 0; i < n; ++i) y[i] /= sum;
}

// sq-pnorm-max of a row, argmin_{y in simplex} gamma/2 ||y||_p^2 - y.x, p in (1, 2]:
// y = u / sum(u), u_i = (x_i - tau)_+^q with q = 1/(p-1) and tau the root of
// phi(tau) = log A_q - (2-p)/p log A_{q+1} - log gamma, A_k = sum_i (x_i - tau)_+^k
// (the KKT condition sum(u) = gamma ||u||_p^{2-p} in logs). tau lies in [x_max - gamma, x_max):
// phi >= 0 at the lower end and phi -> -inf at x_max. Safeguarded Newton from the lower end,
// bisecting when a step leaves the bracket; only values above x_max - gamma can be in the
// support, so the iterations run over those (`candidates`, scratch of n entries). For the
// paper's p = 1.5 (q = 2) the powers are products, with no call to pow.
template <typename T>
void sq_pnorm_max_row(const T* x, T* y, int64_t n, T gamma, T p, T* candidates) {
  const T q = T(1) / (p - T(1)), c = (T(2) - p) / p, log_gamma = std::log(gamma);
  const bool q_is_two = q == T(2);
  T x_max = x[0];
  for (int64_t i = 1; i < n; ++i) x_max = std::max(x_max, x[i]);
  int64_t m = 0;
  for (int64_t i = 0; i < n; ++i) {
    candidates[m] = x[i];
    m += x[i] > x_max - gamma;
  }
  T lo = x_max - gamma, hi = x_max, tau = lo;
  for (int iter = 0; iter < 200; ++iter) {
    T a_qm1 = 0, a_q = 0, a_qp1 = 0;
    for (int64_t i = 0; i < m; ++i) {
      const T d = candidates[i] - tau;
      if (d > T(0)) {
        const T pw = q_is_two ? d : std::pow(d, q - T(1));
        a_qm1 += pw;
        a_q += pw * d;
        a_qp1 += pw * d * d;
      }
    }
    const T phi = std::log(a_q) - c * std::log(a_qp1) - log_gamma;
    // phi is only known to a few ulps: past that, Newton wanders and bisection crawls
    if (std::abs(phi) <= T(8) * std::numeric_limits<T>::epsilon()) break;
    if (phi > T(0)) lo = tau; else hi = tau;
    const T dphi = -q * a_qm1 / a_q + q * (T(2) - p) * a_q / a_qp1;
    T next = dphi < T(0) ? tau - phi / dphi : (lo + hi) / T(2);
    if (!(next > lo && next < hi)) next = (lo + hi) / T(2);
    if (next == tau || !(hi > lo)) break;  // converged to float resolution
    tau = next;
  }
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    const T d = x[i] - tau;
    y[i] = d > T(0) ? (q_is_two ? d * d : std::pow(d, q)) : T(0);
    sum += y[i];
  }
  for (int64_t i = 0; i < n; ++i) y[i] /= sum;
}

enum class SupportWeight { kOne, kSqrt, kPow };  // w = 1, sqrt(y), y^{2-alpha}

template <typename T, SupportWeight kWeight>
void sparse_jvp_row(const T* y, const T* g, T* out, int64_t n, T alpha, const int64_t* group, T* acc,
                    T* count) {
  T wg = 0, w_sum = 0;
  for (int64_t i = 0; i < n; ++i) {
    T w;
    if constexpr (kWeight == SupportWeight::kOne) {
      w = y[i] > T(0) ? T(1) : T(0);
    } else if constexpr (kWeight == SupportWeight::kSqrt) {
      w = std::sqrt(y[i]);  // 0 off the support
    } else {
      w = y[i] > T(0) ? std::pow(y[i], T(2) - alpha) : T(0);
    }
    out[i] = w;
    wg += w * g[i];
    w_sum += w;
  }
  const T mean = wg / w_sum;
  for (int64_t i = 0; i < n; ++i) out[i] *= g[i] - mean;
  if (!group) return;
  for (int64_t i = 0; i < n; ++i) acc[i] = count[i] = T(0);
  for (int64_t i = 0; i < n; ++i) {
    const int64_t k = group[i] >= 0 ? group[i] : 0;
    const T inside = group[i] >= 0 ? T(1) : T(0);
    acc[k] += inside * out[i];
    count[k] += inside;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = group[i] >= 0 ? acc[group[i]] / count[group[i]] : T(0);
}

}  // namespace regattn
