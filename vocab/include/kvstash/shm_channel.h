// The shared-memory request channel between libkvstash and kvstashd on one
// host (docs/protocol.md "Shared-memory channel"): one POSIX shared memory
// segment that the client creates and the daemon maps after AttachChannel,
// holding two single-producer single-consumer byte rings of Envelope frames.
//
//   offset 0      SegmentHeader (magic, version, ring sizes, client_closed)
//   offset 64     request ring control (client -> daemon)
//   offset 256    reply ring control   (daemon -> client)
//   offset 4096   request ring data, request_ring_bytes (a power of two)
//   then          reply ring data, reply_ring_bytes (a power of two)
//
// A ring's control holds three words, each on its own cache line: head (the
// consumer's read position), tail (the producer's write position; both count
// bytes since the start and only grow) and awake (1 while the consumer polls
// the ring, 0 while it may sleep). A frame is an 8-byte header (length, and
// its bitwise complement as a check) and the Envelope bytes, padded to 8.
// Frames wrap around the ring's end.
//
// Wake-ups follow the eventcount pattern: a consumer about to sleep stores
// awake = 0, fences (seq_cst), checks its ring once more, and only then
// sleeps; a producer publishes its frame (tail), fences, and reads awake: 0
// means it rings the consumer's doorbell (kvstashd's doorbell socket, or an
// empty ZeroMQ message). Either the consumer sees the frame, or the
// producer sees it asleep.
//
// Neither side trusts the other's words: each keeps its own position in
// private memory and checks the other's (ring bytes in use never exceed the
// ring, a frame's length fits what is in use) before it copies anything. A
// check that fails is Corrupt: the channel is closed, never repaired.
//
// Header-only and allocation-free: the daemon runs these functions under
// its SIGBUS guard (a client can shrink the segment at any time).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace kvstash::channel {

inline constexpr uint32_t kMagic = 0x4353564b;  // "KVSC"
inline constexpr uint32_t kVersion = 1;
inline constexpr uint64_t kControlBytes = 4096;  // the header page
inline constexpr uint64_t kRequestControlOffset = 64;
inline constexpr uint64_t kReplyControlOffset = 256;
inline constexpr uint64_t kHeadOffset = 0;   // within a ring's control
inline constexpr uint64_t kTailOffset = 64;  // own cache line
inline constexpr uint64_t kAwakeOffset = 128;
inline constexpr uint64_t kFrameHeaderBytes = 8;
inline constexpr uint64_t kMinRingBytes = 4096;
inline constexpr uint64_t kMaxRingBytes = 64ull << 20;
inline constexpr uint64_t kDefaultRingBytes = 1ull << 20;

struct SegmentHeader {
  uint32_t magic;
  uint32_t version;
  uint64_t request_ring_bytes;
  uint64_t reply_ring_bytes;
  uint32_t client_closed;  // 1: the client is gone; the daemon detaches
  uint32_t reserved;
};
static_assert(sizeof(SegmentHeader) <= kRequestControlOffset);

inline bool ValidRingBytes(uint64_t bytes) {
  return bytes >= kMinRingBytes && bytes <= kMaxRingBytes && (bytes & (bytes - 1)) == 0;
}
inline uint64_t SegmentBytes(uint64_t request_ring_bytes, uint64_t reply_ring_bytes) {
  return kControlBytes + request_ring_bytes + reply_ring_bytes;
}
// Ring bytes one frame of `size` payload bytes takes.
inline uint64_t FrameBytes(uint64_t size) {
  return kFrameHeaderBytes + ((size + 7) & ~uint64_t{7});
}
// The largest payload a ring carries (larger frames travel over ZeroMQ).
inline uint64_t MaxFrame(uint64_t ring_bytes) { return ring_bytes / 4; }

inline uint64_t LoadWord64(const uint8_t* at) {
  return __atomic_load_n(reinterpret_cast<const uint64_t*>(at), __ATOMIC_ACQUIRE);
}
inline void StoreWord64(uint8_t* at, uint64_t value) {
  __atomic_store_n(reinterpret_cast<uint64_t*>(at), value, __ATOMIC_SEQ_CST);
}
inline uint32_t LoadWord32(const uint8_t* at) {
  return __atomic_load_n(reinterpret_cast<const uint32_t*>(at), __ATOMIC_SEQ_CST);
}
inline void StoreWord32(uint8_t* at, uint32_t value) {
  __atomic_store_n(reinterpret_cast<uint32_t*>(at), value, __ATOMIC_SEQ_CST);
}
inline void Fence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

enum class RingResult { kOk, kEmpty, kFull, kCorrupt };

// One ring as seen from one side; `position` is that side's own head
// (consumer) or tail (producer), kept in its private memory.
struct Ring {
  uint8_t* control = nullptr;
  uint8_t* data = nullptr;
  uint64_t bytes = 0;  // a power of two
  uint64_t position = 0;

  uint8_t* head_word() const { return control + kHeadOffset; }
  uint8_t* tail_word() const { return control + kTailOffset; }
  uint8_t* awake_word() const { return control + kAwakeOffset; }

  // Copies with wrap-around; `at` is a position.
  void CopyIn(uint64_t at, const void* from, uint64_t size) {
    const uint64_t offset = at & (bytes - 1);
    const uint64_t first = size < bytes - offset ? size : bytes - offset;
    std::memcpy(data + offset, from, first);
    if (first < size) std::memcpy(data, static_cast<const uint8_t*>(from) + first, size - first);
  }
  void CopyOut(uint64_t at, void* to, uint64_t size) const {
    const uint64_t offset = at & (bytes - 1);
    const uint64_t first = size < bytes - offset ? size : bytes - offset;
    std::memcpy(to, data + offset, first);
    if (first < size) std::memcpy(static_cast<uint8_t*>(to) + first, data, size - first);
  }

  // Producer: publishes one frame. kFull when it does not fit now (the
  // caller sends it another way), kCorrupt when the consumer's head is
  // impossible.
  RingResult Push(const void* payload, uint32_t size) {
    const uint64_t head = LoadWord64(head_word());
    const uint64_t used = position - head;
    if (used > bytes || (used & 7) != 0) return RingResult::kCorrupt;
    const uint64_t need = FrameBytes(size);
    if (size > MaxFrame(bytes) || need > bytes - used) return RingResult::kFull;
    const uint32_t header[2] = {size, ~size};
    CopyIn(position, header, sizeof(header));
    CopyIn(position + kFrameHeaderBytes, payload, size);
    position += need;
    StoreWord64(tail_word(), position);  // publishes the frame
    return RingResult::kOk;
  }

  // Consumer: whether a frame may be waiting (the producer's tail moved).
  bool MaybeReady() const { return LoadWord64(tail_word()) != position; }

  // Consumer: copies the next frame into `out` (capacity `out_bytes`, at
  // least MaxFrame(bytes)) and frees its ring bytes.
  RingResult Pop(void* out, uint64_t out_bytes, uint32_t* size) {
    const uint64_t tail = LoadWord64(tail_word());
    const uint64_t ready = tail - position;
    if (ready == 0) return RingResult::kEmpty;
    if (ready > bytes || ready < kFrameHeaderBytes || (ready & 7) != 0) return RingResult::kCorrupt;
    uint32_t header[2];
    CopyOut(position, header, sizeof(header));
    if (header[1] != ~header[0] || header[0] > MaxFrame(bytes) || header[0] > out_bytes ||
        FrameBytes(header[0]) > ready) {
      return RingResult::kCorrupt;
    }
    CopyOut(position + kFrameHeaderBytes, out, header[0]);
    position += FrameBytes(header[0]);
    StoreWord64(head_word(), position);
    *size = header[0];
    return RingResult::kOk;
  }
};

// The two rings of a mapped segment whose sizes were checked.
inline Ring RequestRing(uint8_t* base, uint64_t request_ring_bytes) {
  return Ring{base + kRequestControlOffset, base + kControlBytes, request_ring_bytes, 0};
}
inline Ring ReplyRing(uint8_t* base, uint64_t request_ring_bytes, uint64_t reply_ring_bytes) {
  return Ring{base + kReplyControlOffset, base + kControlBytes + request_ring_bytes,
              reply_ring_bytes, 0};
}

}  // namespace kvstash::channel
