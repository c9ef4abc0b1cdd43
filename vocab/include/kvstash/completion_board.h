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
//
// Both sides share every word of the protocol from here: the slot layout,
// the limits (also exported by the C API, kvstash.h), the signal a request
// carries, the release rule and the layer-range split.
#pragma once

#include <cstdint>

namespace kvstash {

// Board slots [slot, slot + count) a request signals on, and the sequence
// number that releases them. A retrieve's slot + k is its layer range k; a
// store's slot is the engine's gate and slot + 1 says its blocks may be
// reused.
struct BoardSignal {
  uint32_t slot = 0;
  uint32_t count = 0;
  uint32_t sequence = 0;
};

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

// The release rule, for any CPU writer of board words (`write(slot, offset,
// value)` returns false when the board's memory is gone): every slot's
// status first, then every value, so that whoever sees a value released
// also sees the final status of every slot of the request.
template <typename WriteWord>
bool ReleaseBoardSlots(const uint32_t* slots, uint32_t count, uint32_t sequence, uint32_t status,
                       WriteWord&& write) {
  bool ok = true;
  for (uint32_t i = 0; i < count; ++i) ok = write(slots[i], kBoardStatusOffset, status) && ok;
  for (uint32_t i = 0; i < count; ++i) ok = write(slots[i], kBoardValueOffset, sequence) && ok;
  return ok;
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
