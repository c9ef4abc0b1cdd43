// One run of a row, copied by the CPU twins.
//
// page_first host pools (SGLang) interleave layers per token, so a page is
// gathered in runs of one token's heads: 1-2 KiB for common models (8 KV
// heads x 128 x bf16 = 2 KiB). glibc's memcpy moves those runs through its
// vector loop at 5.9-6.8 GB/s on an AVX-512 EPYC, where `rep movsb` moves
// 9.1-11.0 GB/s on the same strided rows (at 512 B they tie; from 3 KiB on
// glibc is ahead). On a Xeon both move these rows at the same rate. Runs in
// that band take `rep movsb` on x86-64, every other run memcpy.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvstash::kernels::internal {

inline constexpr size_t kMovsbRunMin = 1024;
inline constexpr size_t kMovsbRunMax = 2048;

inline void CopyRun(uint8_t* dst, const uint8_t* src, size_t bytes) {
#if defined(__x86_64__)
  if (bytes >= kMovsbRunMin && bytes <= kMovsbRunMax) {
    asm volatile("rep movsb" : "+D"(dst), "+S"(src), "+c"(bytes) : : "memory");
    return;
  }
#endif
  std::memcpy(dst, src, bytes);
}

}  // namespace kvstash::kernels::internal
