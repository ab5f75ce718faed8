// The compaction that the row algorithms make of each row, in 8 float lanes on x86-64 CPUs
// with AVX2 (chosen at run time, as the powers of avx2_powers.h: the extension itself is
// built for baseline x86-64, whose 4-lane SSE2 has no variable lane permutation).
// row_algorithms.h's compact_above dispatches to it for float rows; it computes exactly what
// the portable loop there computes. (The rows' range, row_range, gained nothing in 8 lanes:
// on 30-50 wide rows the call and the reduction across lanes cost what the loop saves, on
// 400 wide rows the loads set its time.)
#pragma once

#include <cstdint>
#include <cstring>

#include "avx2_powers.h"

namespace regattn {

#ifdef REGATTN_HAVE_AVX2_POWERS
// For each 8-bit lane mask, the indices of its set lanes in order, then zeros: the lane
// permutation that moves the kept values of 8 lanes to the front.
struct CompactionTable {
  int32_t lanes[256][8];
  constexpr CompactionTable() : lanes{} {
    for (int mask = 0; mask < 256; ++mask) {
      int k = 0;
      for (int l = 0; l < 8; ++l) {
        if (mask & (1 << l)) lanes[mask][k++] = l;
      }
    }
  }
};
inline constexpr CompactionTable kCompaction{};

// compact_above (row_algorithms.h) for float rows: 8 values per step, the kept ones moved to
// the front by one permutation from kCompaction and stored whole (the lanes past the kept
// ones are overwritten by the next step or lie past the count), where the portable loop
// stores every value and advances the write index by its comparison, one value per step.
// Stores only below n, like the portable loop, and after loading what it overwrites, so that
// out may be x and pos may be index.
__attribute__((target("avx2,fma"))) inline int64_t compact_above_avx2(const float* x, const int32_t* index,
                                                                     int64_t n, float shift, float scale,
                                                                     float floor, float* out, int32_t* pos) {
  const v8f zero = {};
  const v8i lane = {0, 1, 2, 3, 4, 5, 6, 7};
  int64_t k = 0, i = 0;
  for (; i + 8 <= n; i += 8) {
    v8f v;
    std::memcpy(&v, x + i, sizeof(v));
    v = (v - shift) * scale;
    const v8i keep = v > zero + floor;
    v8f keep_bits;
    std::memcpy(&keep_bits, &keep, sizeof(keep_bits));
    const int mask = __builtin_ia32_movmskps256(keep_bits);
    v8i perm;
    std::memcpy(&perm, kCompaction.lanes[mask], sizeof(perm));
    if (pos) {
      v8i at = lane + static_cast<int32_t>(i);
      if (index) std::memcpy(&at, index + i, sizeof(at));
      const v8i kept = __builtin_ia32_permvarsi256(at, perm);
      std::memcpy(pos + k, &kept, sizeof(kept));
    }
    if (out) {
      const v8f kept = __builtin_ia32_permvarsf256(v, perm);
      std::memcpy(out + k, &kept, sizeof(kept));
    }
    k += __builtin_popcount(mask);
  }
  for (; i < n; ++i) {
    const float v = (x[i] - shift) * scale;
    const int32_t at = index ? index[i] : static_cast<int32_t>(i);
    if (out) out[k] = v;
    if (pos) pos[k] = at;
    k += v > floor;
  }
  return k;
}
#endif

}  // namespace regattn
