// The threshold search of alpha-entmax, shared by the row algorithm (entmax_halley_row in
// row_algorithms.h) and the AVX-512 register kernel (entmax_halley_rows_avx512 in
// avx512_rows.h): both take the same steps from the same sums.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

namespace regattn {

// alpha-entmax's threshold: with z = (alpha-1) (x - x_max) and q = 1/(alpha-1), tau is the
// root of F(tau) = ||(z - tau)_+||_q - 1, which decreases in
// tau, with F >= 0 at z_max - 1 = -1 and F <= 0 at -n^{1-alpha}. F is the q-norm of a convex
// vector function, convex for q >= 1 (alpha <= 2), and nearly linear (exactly so while one
// value is active), so Newton's method from the bracket's lower end climbs to the root
// without overshooting in a few steps, where Newton on sum (z-tau)^q - 1 would crawl for
// large q. We take Halley's step instead where it is defined (it also needs F'', i.e.
// sum d^{q-2} = sum d^{q-1} / d, a division per entry where each pass costs a pow per
// entry): its cubic convergence saves one of the usual four passes at alpha = 1.3. Steps
// that leave the bracket (alpha > 2, or Halley overshooting) fall back to bisection. The
// caller computes the sums over the support at `tau` and calls step() until it returns false.
template <typename T>
struct EntmaxThresholdSearch {
  T alpha, am1, q;
  int64_t n;  // the row's values: the bracket's upper end -n^{1-alpha}
  // The bracket's upper end -n^{1-alpha} costs a pow that the usual climb from lo never
  // needs: hi starts at z_max = 0 (F = -1 there) and is tightened at the first step that
  // leaves the bracket.
  T lo = T(-1), hi = T(0), tau = T(-1);
  bool hi_tight = false;

  EntmaxThresholdSearch(T alpha_, int64_t n_) : alpha(alpha_), am1(alpha_ - T(1)), q(T(1) / am1), n(n_) {}

  // From s_q, s_qm1, s_qm2 = sum d^q, d^{q-1}, d^{q-2} over the support at tau (d = z - tau):
  // false where tau is final, else true with tau moved to the next step.
  bool step(T s_q, T s_qm1, T s_qm2) {
    // f = F(tau) is only known to a few ulps: past |f| <= 8 eps, Newton wanders and bisection
    // crawls. Tested on s_q = (1 + f)^q, |s_q - 1| <= 8 q eps to first order, so that the
    // usual last pass (at the root) takes no pow
    if (std::abs(s_q - T(1)) <= T(8) * q * std::numeric_limits<T>::epsilon()) return false;
    const T norm = std::pow(s_q, T(1) / q);
    const T f = norm - T(1);
    if (f > T(0)) lo = tau; else hi = tau;
    // F' = -s_qm1 s_q^{1/q - 1} = -s_qm1 norm / s_q,  F'' = (q-1) norm / s_q (s_qm2 - s_qm1^2 / s_q)
    const T d1 = -s_qm1 * norm / s_q;
    const T d2 = (q - T(1)) * norm / s_q * (s_qm2 - s_qm1 * s_qm1 / s_q);
    const T halley = T(2) * d1 * d1 - f * d2;  // denominator; Newton where it is not > 0 (or NaN)
    T next = halley > T(0) ? tau - T(2) * f * d1 / halley : tau - f / d1;
    if (!(next > lo && next < hi)) {
      if (!hi_tight) hi = std::min(hi, -std::pow(T(n), -am1));
      hi_tight = true;
      next = (lo + hi) / T(2);
    }
    if (next == tau) return false;  // converged to float resolution
    tau = next;
    return true;
  }

  // Whether another pass may run: the bracket is not empty and the pass count is bounded.
  bool open(int passes) const { return passes < 100 && hi > lo; }

  // sum^{alpha-2}, the backward weights' scale (entmax_halley_row), for the sum of the
  // unnormalized output: at the usual exit it is 1 to a few ulps, where its expansion to
  // second order in sum - 1 is exact to rounding (the next term is below eps^{3/2}), with no pow.
  T weight_scale(T sum) const {
    const T delta = sum - T(1);
    return std::abs(delta) <= std::sqrt(std::numeric_limits<T>::epsilon())
               ? T(1) + (alpha - T(2)) * delta * (T(1) + (alpha - T(3)) / T(2) * delta)
               : std::pow(sum, alpha - T(2));
  }
};

}  // namespace regattn
