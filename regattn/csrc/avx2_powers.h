// The powers alpha-entmax's root finding spends its time on, and the exponentials of
// regattn.dp's entropic Viterbi (exp8_nonpositive), in 8 float lanes on x86-64 CPUs with
// AVX2 and FMA (chosen at run time: the extension itself is built for baseline x86-64).
// Each Halley step of entmax_halley_row needs d^r for every value of the active set; glibc's
// powf takes about 10 ns per call, this about 3 ns per value, to within a few ulp of it
// (2-4 ulp for the exponents of alpha in [1.1, 2], measured against double-precision pow).
#pragma once

#include <atomic>
#include <cstdint>
#include <cstring>
#include <limits>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define REGATTN_HAVE_AVX2_POWERS 1
#endif

namespace regattn {

// Whether this CPU can run the AVX2 paths (power_sums_avx2 here, those of avx2_rows.h).
inline bool avx2_available() {
#ifdef REGATTN_HAVE_AVX2_POWERS
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

// Whether the float row algorithms take their AVX2 paths (these powers, avx2_rows.h's
// compaction): where available, unless switched off (tests switch them off to run
// the portable paths on the same machine).
inline std::atomic<bool>& avx2_enabled() {
  static std::atomic<bool> enabled{avx2_available()};
  return enabled;
}

// Whether this CPU can run the AVX-512 paths (those of avx512_rows.h).
inline bool avx512_available() {
#ifdef REGATTN_HAVE_AVX2_POWERS
  return __builtin_cpu_supports("avx512f");
#else
  return false;
#endif
}

// Whether the float row algorithms take their AVX-512 paths, as avx2_enabled.
inline std::atomic<bool>& avx512_enabled() {
  static std::atomic<bool> enabled{avx512_available()};
  return enabled;
}

#ifdef REGATTN_HAVE_AVX2_POWERS
typedef float v8f __attribute__((vector_size(32)));
typedef int32_t v8i __attribute__((vector_size(32)));

// v rounded to the nearest integer (halves away from zero), for |v| < 2^31
__attribute__((target("avx2,fma"))) inline v8f round_to_integer8(v8f v) {
  const v8f zero = {};
  return __builtin_convertvector(__builtin_convertvector(v + (v < zero ? zero - 0.5f : zero + 0.5f), v8i), v8f);
}

// x^r for finite x > 0, as 2^(r log2 x): log2 x = e + log2 m with m in [1/sqrt 2, sqrt 2)
// (the atanh series of log m), and r e, the large part of the exponent, computed exactly by
// splitting r into a 12-bit head and a tail, so that the error of the result does not grow
// with |log x|. Subnormal x are scaled up first; results below 2^-126 are 0, above 2^127 inf.
__attribute__((target("avx2,fma"))) inline v8f pow8(v8f x, float r) {
  const v8f zero = {};
  const v8i tiny = x < zero + std::numeric_limits<float>::min();
  x = tiny ? x * 16777216.0f : x;  // 2^24
  v8i bits;
  std::memcpy(&bits, &x, sizeof(bits));
  v8i e = ((bits >> 23) & 0xff) - 127 + (tiny & -24);
  const v8i mantissa_bits = (bits & 0x007fffff) | 0x3f800000;
  v8f m;
  std::memcpy(&m, &mantissa_bits, sizeof(m));
  const v8i high = m > zero + 1.41421356f;
  m = high ? m * 0.5f : m;
  e -= high;  // high is -1 where set
  const v8f s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
  // log2 m = (2 / ln 2) (s + s^3/3 + s^5/5 + s^7/7 + s^9/9), |s| <= 0.172
  const v8f log2_m = s * (2.8853900817779268f + s2 * (0.9617966939259756f + s2 * (0.5770780163555854f +
                                                 s2 * (0.4121985831111324f + s2 * 0.32059889797532524f))));
  uint32_t r_bits;
  std::memcpy(&r_bits, &r, sizeof(r_bits));
  r_bits &= 0xfffff000u;
  float r_head;
  std::memcpy(&r_head, &r_bits, sizeof(r_head));
  const float r_tail = r - r_head;
  const v8f ef = __builtin_convertvector(e, v8f);
  const v8f head = ef * r_head;  // exact: 12 + 8 significant bits
  const v8f n1 = round_to_integer8(head);
  const v8f f = (head - n1) + (ef * r_tail + r * log2_m);
  const v8f n2 = round_to_integer8(f);
  const v8f g = (f - n2) * 0.69314718055994531f;  // 2^(f - n2) = e^g, |g| <= ln(2)/2
  const v8f p = 1.0f + g * (1.0f + g * (0.5f + g * (1.0f / 6 + g * (1.0f / 24 + g * (1.0f / 120 +
                                                  g * (1.0f / 720 + g * (1.0f / 5040)))))));
  const v8i n = __builtin_convertvector(n1 + n2, v8i);
  const v8i under = n < -126, over = n > 127;
  const v8i scale_bits = (((under | over) ? v8i{} : n) + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  const v8f result = under ? zero : p * scale;
  return over ? zero + std::numeric_limits<float>::infinity() : result;
}

// e^x for x <= 0 (-inf included), as 2^n e^g with n = round(x / ln 2) and g = x - n ln 2
// (ln 2 split in a 9-bit head, so that n ln2_head is exact), |g| <= ln(2)/2, by the Taylor
// polynomial of degree 7 (truncation below 1e-8 relative: within about 1 ulp of expf).
// Results below 2^-126 are 0 (no subnormals). regattn.dp's entropic Viterbi spends its
// forward on these exponentials; glibc's expf takes several ns per call.
__attribute__((target("avx2,fma"))) inline v8f exp8_nonpositive(v8f x) {
  const v8f zero = {};
  x = x < zero - 104.0f ? zero - 104.0f : x;  // e^-104 < 2^-126: 0 below, and no -inf to round
  const v8f n = round_to_integer8(x * 1.44269504088896341f);
  const v8f g = (x - n * 0.693359375f) - n * -2.12194440054690583e-4f;
  const v8f p = 1.0f + g * (1.0f + g * (0.5f + g * (1.0f / 6 + g * (1.0f / 24 + g * (1.0f / 120 +
                                                  g * (1.0f / 720 + g * (1.0f / 5040)))))));
  const v8i ni = __builtin_convertvector(n, v8i);
  const v8i under = ni < -126;
  const v8i scale_bits = ((under ? v8i{} : ni) + 127) << 23;
  v8f scale;
  std::memcpy(&scale, &scale_bits, sizeof(scale));
  return under ? zero : p * scale;
}

// out[k] = e^x[k] for the n values x[k] <= 0 (exp8_nonpositive; the last block padded).
__attribute__((target("avx2,fma"))) inline void exp_nonpositive_avx2(const float* x, float* out, int64_t n) {
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    v8f v;
    std::memcpy(&v, x + k, sizeof(v));
    const v8f e = exp8_nonpositive(v);
    std::memcpy(out + k, &e, sizeof(e));
  }
  if (k < n) {
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tail, x + k, (n - k) * sizeof(float));
    v8f v;
    std::memcpy(&v, tail, sizeof(v));
    const v8f e = exp8_nonpositive(v);
    std::memcpy(tail, &e, sizeof(e));
    std::memcpy(out + k, tail, (n - k) * sizeof(float));
  }
}

// out[k] = e^((x[k] - shift) * scale) for the n values of a row whose max is `shift` (every
// exponent <= 0), and returns their sum: softmax's exponentials and normalizer in one pass
// (exp8_nonpositive; the last block through a padded copy, its padding not summed).
__attribute__((target("avx2,fma"))) inline float exp_shifted_sum_avx2(const float* x, int64_t n, float shift,
                                                                      float scale, float* out) {
  v8f sum = {};
  int64_t k = 0;
  for (; k + 8 <= n; k += 8) {
    v8f v;
    std::memcpy(&v, x + k, sizeof(v));
    const v8f e = exp8_nonpositive((v - shift) * scale);
    std::memcpy(out + k, &e, sizeof(e));
    sum += e;
  }
  float total = 0.0f;
  for (int l = 0; l < 8; ++l) total += sum[l];
  if (k < n) {
    float tail[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    std::memcpy(tail, x + k, (n - k) * sizeof(float));
    v8f v;
    std::memcpy(&v, tail, sizeof(v));
    const v8f e = exp8_nonpositive((v - shift) * scale);
    std::memcpy(tail, &e, sizeof(e));
    std::memcpy(out + k, tail, (n - k) * sizeof(float));
    for (int64_t l = 0; l < n - k; ++l) total += tail[l];
  }
  return total;
}

// For the a values d of `active` (read in blocks of 8: entries [a, a rounded up to 8) are
// scratch): power[k] = d^(r+1) and the sums of d^(r+1), d^r and d^(r-1), as the loop in
// entmax_halley_row computes them with powf.
__attribute__((target("avx2,fma"))) inline void power_sums_avx2(float* active, int64_t a, float r, float* power,
                                                             float& s_rp1, float& s_r, float& s_rm1) {
  const v8f zero = {};
  v8f sum_rp1 = zero, sum_r = zero, sum_rm1 = zero;
  const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
  for (int64_t k = 0; k < a; k += 8) {
    const v8i valid = lane + static_cast<int32_t>(k) < static_cast<int32_t>(a);
    v8f d;
    std::memcpy(&d, active + k, sizeof(d));
    d = valid ? d : zero + 1.0f;  // the scratch entries: any positive value, masked below
    const v8f p = valid ? pow8(d, r) : zero;
    const v8f pd = p * d;
    std::memcpy(power + k, &pd, sizeof(pd));
    sum_r += p;
    sum_rm1 += p / d;
    sum_rp1 += pd;
  }
  s_rp1 = s_r = s_rm1 = 0.0f;
  for (int l = 0; l < 8; ++l) {
    s_rp1 += sum_rp1[l];
    s_r += sum_r[l];
    s_rm1 += sum_rm1[l];
  }
}
#endif

}  // namespace regattn
