// The completion board: a small array of slots in POSIX shared memory that an
// engine creates once, registers with kvstashd (RegisterKV's `board`) and that
// both processes map (and, on GPUs, cudaHostRegister device-mapped). GPU
// streams on either side write and wait on its words (cuStreamWriteValue32 /
// cuStreamWaitValue32), and either CPU can write them directly: a stream
// waiting on a word in host memory can always be released by the waiting
// side's own CPU, so nothing waits forever (docs/protocol.md "GPU-side
// completion").
//
// Slot s occupies bytes [s * kBoardSlotBytes, (s + 1) * kBoardSlotBytes):
//   +0 value:  the request's sequence number once the slot is released
//   +4 status: an ErrorCode (0 = Ok), written before the value; final once
//              the request's last slot holds its sequence number
// One slot per cache line, so that no two signals share one.
#pragma once

#include <cstdint>

namespace kvstash {

constexpr uint32_t kBoardSlotBytes = 64;
constexpr uint32_t kBoardValueOffset = 0;
constexpr uint32_t kBoardStatusOffset = 4;
constexpr uint32_t kMaxBoardSlots = 4096;
// Layer ranges one retrieve may signal separately.
constexpr uint32_t kMaxLayerRanges = 256;

// Layer range k of `ranges` over `num_layers` registration layers (in
// registration order) is [LayerRangeBegin(k), LayerRangeBegin(k + 1)).
constexpr uint32_t LayerRangeBegin(uint32_t num_layers, uint32_t ranges, uint32_t k) {
  return uint32_t(uint64_t(k) * num_layers / ranges);
}

// The range that holds `layer` (< num_layers).
constexpr uint32_t LayerRangeOf(uint32_t num_layers, uint32_t ranges, uint32_t layer) {
  uint32_t k = uint32_t(uint64_t(layer) * ranges / num_layers);
  while (k > 0 && LayerRangeBegin(num_layers, ranges, k) > layer) --k;
  while (k + 1 < ranges && LayerRangeBegin(num_layers, ranges, k + 1) <= layer) ++k;
  return k;
}

// CPU access to a board word shared with another process and with GPUs.
inline void StoreBoardWord(uint8_t* board, uint32_t slot, uint32_t offset, uint32_t value) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(board + uint64_t(slot) * kBoardSlotBytes + offset),
                   value, __ATOMIC_RELEASE);
}
inline uint32_t LoadBoardWord(const uint8_t* board, uint32_t slot, uint32_t offset) {
  return __atomic_load_n(
      reinterpret_cast<const uint32_t*>(board + uint64_t(slot) * kBoardSlotBytes + offset),
      __ATOMIC_ACQUIRE);
}

}  // namespace kvstash
