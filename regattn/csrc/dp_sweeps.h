// The sweeps of regattn/dp.py's smoothed Viterbi, one sequence at a time: the forward
// recursion V_t(i) = max_Omega_j (theta[t-1, i, j] + V_{t-1}(j)) with the local argmax
// distributions Q_t[i, :] it visits, the reverse sweep U_T = q, E_t = Q_t * U_t[:, None],
// U_{t-1} = sum_i E_t[i, :] (the expected transition marginals), and the hard Viterbi decode;
// and the two sweeps of its smoothed DTW (forward with the local weights, expected alignment).
// dp.py documents the recursions; its torch code is the reference these are tested against.
// A sequence's steps t >= length are frozen as there: Q_t = identity, V_t = V_{t-1}, E_t = 0.
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <type_traits>
#include <vector>

#include "row_algorithms.h"

namespace regattn {

enum class DpReg { kEntropy, kL2 };

// What a forward sweep found wrong in its sequence's used potentials (ValueErrors in Python,
// raised after the parallel loop, in this order of priority).
struct DpInputFlags {
  bool nan = false, pos_inf = false, no_path = false;
};

// out[k] = e^x[k] for x[k] <= 0: 8 float lanes where the CPU has AVX2 (exp8_nonpositive),
// std::exp otherwise and for double.
template <typename T>
void exp_nonpositive(const T* x, T* out, int64_t n) {
#ifdef REGATTN_HAVE_AVX2_POWERS
  if constexpr (std::is_same_v<T, float>) {
    static const bool avx2 = avx2_available();
    if (avx2) return exp_nonpositive_avx2(x, out, n);
  }
#endif
  for (int64_t k = 0; k < n; ++k) out[k] = std::exp(x[k]);
}

// max_Omega and argmax_Omega of each of the rows of v (rows, n): values[r] and p (rows, n).
// Entries -inf get p = 0; a row of only -inf has value -inf and p = 0 (an unreachable node).
// The computation is on (v - max) / gamma, as dp._local_max's. The entropy's exponentials
// are taken over all rows at once (one vectorised pass), the sparsemax projection row by row.
template <typename T>
void local_max_rows(const T* v, T* p, T* values, int64_t rows, int64_t n, DpReg reg, T gamma, T* candidates) {
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  const T scale = T(1) / gamma;
  for (int64_t r = 0; r < rows; ++r) {
    const T* vr = v + r * n;
    const T shift = row_max(vr, n);
    values[r] = shift;  // the shift until the value is known
    T* pr = p + r * n;
    if (shift == kNegInf) {  // entropy: the exponent -inf, whose e^ is 0
      std::fill(pr, pr + n, reg == DpReg::kEntropy ? kNegInf : T(0));
      continue;
    }
    if (reg == DpReg::kEntropy) {  // p = the exponent (v - max) / gamma for now
      for (int64_t i = 0; i < n; ++i) pr[i] = (vr[i] - shift) * scale;
      continue;
    }
    // p = (z - tau)_+ with z = (v - shift) / gamma (project_simplex_row: -inf entries are never
    // candidates and get 0). On the support v = shift + gamma (p + tau), so the value
    // <p, v> - gamma/2 ||p||^2 = shift + gamma (||p||^2 / 2 + tau), and tau = -max p (the
    // largest z, 0, is in the support): no sum over v, whose -inf entries would give 0 * -inf.
    project_simplex_row(vr, pr, n, shift, scale, candidates);
    T square = 0, largest = 0;
    for (int64_t i = 0; i < n; ++i) {
      square += pr[i] * pr[i];
      largest = std::max(largest, pr[i]);
    }
    values[r] = shift + gamma * (T(0.5) * square - largest);
  }
  if (reg != DpReg::kEntropy) return;
  exp_nonpositive(p, p, rows * n);
  for (int64_t r = 0; r < rows; ++r) {
    if (values[r] == kNegInf) continue;  // p is e^-inf = 0
    T* pr = p + r * n;
    const T total = row_sum(pr, n);
    const T inv = T(1) / total;  // total >= 1: the max contributes e^0
    for (int64_t i = 0; i < n; ++i) pr[i] *= inv;
    values[r] += gamma * std::log(total);
  }
}

// Working memory of one thread's sequences: V_{t-1}, V_t, the arguments of a step's local
// maxes (S, S), and the projection's candidates.
template <typename T>
struct ViterbiScratch {
  std::vector<T> prev, cur, arg, candidates;
  explicit ViterbiScratch(int64_t states)
      : prev(states), cur(states), arg(states * states), candidates(states + kPad) {}
};

// Records NaN and +inf among a used step's potentials (-inf: a forbidden transition).
template <typename T>
inline void flag_potentials(const T* theta, int64_t count, DpInputFlags& flags) {
  bool nan = false, pos_inf = false;
  for (int64_t k = 0; k < count; ++k) {
    nan |= std::isnan(theta[k]);
    pos_inf |= theta[k] == std::numeric_limits<T>::infinity();
  }
  flags.nan |= nan;
  flags.pos_inf |= pos_inf;
}

// The forward sweep of one sequence: theta (steps, S, S) -> its value, Q (steps, S, S), the
// final argmax q (S). A value that is not finite flags the sequence as having no path.
template <typename T>
T viterbi_forward_sequence(const T* theta, int64_t steps, int64_t length, int64_t states, DpReg reg, T gamma,
                           T* q, T* q_final, ViterbiScratch<T>& s, DpInputFlags& flags) {
  const int64_t block = states * states;
  std::fill(s.prev.begin(), s.prev.end(), T(0));
  for (int64_t t = 0; t < length; ++t) {
    const T* step = theta + t * block;
    int64_t suspicious = 0;  // NaN or +inf: classified by flag_potentials, off the common path
    for (int64_t i = 0; i < states; ++i) {
      for (int64_t j = 0; j < states; ++j) {
        const T x = step[i * states + j];
        s.arg[i * states + j] = x + s.prev[j];
        suspicious += !(x < std::numeric_limits<T>::infinity());
      }
    }
    if (suspicious) flag_potentials(step, block, flags);
    local_max_rows(s.arg.data(), q + t * block, s.cur.data(), states, states, reg, gamma, s.candidates.data());
    std::swap(s.prev, s.cur);
  }
  for (int64_t t = length; t < steps; ++t) {
    T* qt = q + t * block;
    std::fill(qt, qt + block, T(0));
    for (int64_t i = 0; i < states; ++i) qt[i * states + i] = T(1);
  }
  T value;
  local_max_rows(s.prev.data(), q_final, &value, 1, states, reg, gamma, s.candidates.data());
  flags.no_path |= !std::isfinite(value);
  return value;
}

// The reverse sweep of one sequence: E_t = Q_t * U_t[:, None] into marg (steps, S, S) (0 for
// t >= length) and U_0..U_T into mass (steps + 1, S), from the given U_T (S).
template <typename T>
void viterbi_marginals_sequence(const T* q, const T* u_final, int64_t steps, int64_t length, int64_t states,
                                T* marg, T* mass) {
  const int64_t block = states * states;
  T* u = mass + steps * states;
  std::copy(u_final, u_final + states, u);
  for (int64_t t = steps - 1; t >= 0; --t) {
    T* e = marg + t * block;
    T* prev = mass + t * states;
    if (t >= length) {
      std::fill(e, e + block, T(0));
      std::copy(u, u + states, prev);
    } else {
      const T* qt = q + t * block;
      std::fill(prev, prev + states, T(0));
      for (int64_t i = 0; i < states; ++i) {
        const T ui = u[i];
        for (int64_t j = 0; j < states; ++j) {
          e[i * states + j] = qt[i * states + j] * ui;
          prev[j] += e[i * states + j];
        }
      }
    }
    u = prev;
  }
}

// The hard Viterbi path of one sequence (max-sum with back-pointers, ties to the lowest
// state) into path (steps + 1), -1 past the length; pointers is (length, S) scratch.
template <typename T>
void viterbi_decode_sequence(const T* theta, int64_t length, int64_t steps, int64_t states, int64_t* path,
                             int32_t* pointers, ViterbiScratch<T>& s, DpInputFlags& flags) {
  const int64_t block = states * states;
  std::fill(s.prev.begin(), s.prev.end(), T(0));
  for (int64_t t = 0; t < length; ++t) {
    const T* step = theta + t * block;
    int64_t suspicious = 0;  // as in viterbi_forward_sequence
    for (int64_t k = 0; k < block; ++k) suspicious += !(step[k] < std::numeric_limits<T>::infinity());
    if (suspicious) flag_potentials(step, block, flags);
    for (int64_t i = 0; i < states; ++i) {
      const T* row = step + i * states;
      T best = row[0] + s.prev[0];
      int32_t arg = 0;
      for (int64_t j = 1; j < states; ++j) {
        const T v = row[j] + s.prev[j];
        if (v > best) {
          best = v;
          arg = static_cast<int32_t>(j);
        }
      }
      s.cur[i] = best;
      pointers[t * states + i] = arg;
    }
    std::swap(s.prev, s.cur);
  }
  int64_t y = 0;
  for (int64_t i = 1; i < states; ++i) y = s.prev[i] > s.prev[y] ? i : y;
  flags.no_path |= !std::isfinite(s.prev[y]);
  for (int64_t t = length; t < steps; ++t) path[t + 1] = -1;
  for (int64_t t = length - 1; t >= 0; --t) {
    path[t + 1] = y;
    y = pointers[t * states + y];
  }
  path[0] = y;
}

// DTW (dp.py), one sequence of costs theta (m, n): R (m + 1, n + 1) with R[0, 0] = 0 and +inf
// borders, R[i, j] = theta[i-1, j-1] + min_Omega(R[i-1, j-1], R[i-1, j], R[i, j-1]), where
// min_Omega(x) = -max_Omega(-x); q (m + 2, n + 2, 3): the weights of each cell's local min
// over those three parents, 0 outside the cells 1..m x 1..n (the layout of dp's torch code).
template <typename T>
void dtw_forward_sequence(const T* theta, int64_t m, int64_t n, DpReg reg, T gamma, T* r, T* q) {
  const int64_t rw = n + 1, qw = n + 2;
  r[0] = T(0);
  for (int64_t j = 1; j <= n; ++j) r[j] = std::numeric_limits<T>::infinity();
  for (int64_t i = 1; i <= m; ++i) r[i * rw] = std::numeric_limits<T>::infinity();
  std::fill(q, q + (m + 2) * qw * 3, T(0));
  T negated[3], value, scratch[3 + kPad];  // project_simplex_row pads its candidates
  for (int64_t i = 1; i <= m; ++i) {
    for (int64_t j = 1; j <= n; ++j) {
      negated[0] = -r[(i - 1) * rw + j - 1];
      negated[1] = -r[(i - 1) * rw + j];
      negated[2] = -r[i * rw + j - 1];
      local_max_rows(negated, q + (i * qw + j) * 3, &value, 1, 3, reg, gamma, scratch);
      r[i * rw + j] = theta[(i - 1) * n + j - 1] - value;
    }
  }
}

// The expected alignment of one sequence into e (m + 2, n + 2): E[end] = 1 and each cell passes
// its mass to its parents with the weights q of its local min (dp._dtw_marginals).
template <typename T>
void dtw_marginals_sequence(const T* q, int64_t m, int64_t n, int64_t end_i, int64_t end_j, T* e) {
  const int64_t qw = n + 2;
  std::fill(e, e + (m + 2) * qw, T(0));
  for (int64_t i = m; i >= 1; --i) {
    for (int64_t j = n; j >= 1; --j) {
      const T children = q[((i + 1) * qw + j + 1) * 3] * e[(i + 1) * qw + j + 1] +
                         q[((i + 1) * qw + j) * 3 + 1] * e[(i + 1) * qw + j] +
                         q[(i * qw + j + 1) * 3 + 2] * e[i * qw + j + 1];
      e[i * qw + j] = T(i == end_i && j == end_j) + children;
    }
  }
}

}  // namespace regattn
