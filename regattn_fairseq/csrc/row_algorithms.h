// Exact per-row algorithms behind the sort-based mappings. Each works on one contiguous
// row of `n` values (the unmasked positions of an attention row, in order) and is written
// once, for every backend that calls it.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace regattn {

// Euclidean projection onto the simplex, y = (z - tau)_+ with sum(y) = 1, by Michelot's
// active-set iteration: tau only grows and the active set only shrinks, so it stops after at
// most n passes (a handful in practice) at the exact threshold, with no sort.
template <typename T>
void project_simplex_row(const T* z, T* y, int64_t n) {
  T sum = 0;
  for (int64_t i = 0; i < n; ++i) sum += z[i];
  T tau = (sum - T(1)) / T(n);
  int64_t active = n;
  for (;;) {
    T s = 0;
    int64_t count = 0;
    for (int64_t i = 0; i < n; ++i) {
      if (z[i] > tau) {
        s += z[i];
        ++count;
      }
    }
    // count >= 1 always: the largest z exceeds the mean-based threshold.
    const T next = (s - T(1)) / T(count);
    if (count == active || next <= tau) break;
    tau = next;
    active = count;
  }
  for (int64_t i = 0; i < n; ++i) y[i] = z[i] > tau ? z[i] - tau : T(0);
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
// n entries. For the k largest values the threshold solves sum_{i<=k} (v_i - tau)^2 = 1 in
// closed form; the support is the largest k whose threshold lies below v_(k).
template <typename T>
void entmax15_row(const T* x, T* y, int64_t n, T* sorted) {
  for (int64_t i = 0; i < n; ++i) sorted[i] = x[i] / T(2);
  std::sort(sorted, sorted + n, [](T a, T b) { return a > b; });
  T s1 = 0, s2 = 0, tau = sorted[0] - T(1);
  for (int64_t k = 1; k <= n; ++k) {
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
    const T d = x[i] / T(2) - tau;
    y[i] = d > T(0) ? d * d : T(0);
  }
}

}  // namespace regattn
