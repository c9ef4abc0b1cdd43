// libFuzzer over the daemon's reading of a shared-memory channel's request
// ring (kvstash/shm_channel.h): the input is everything a hostile client can
// write (its tail and awake words and every byte of the ring), and the
// consumer must pop only frames inside the ring, of bounded length, or say
// Corrupt, never read or write outside. What a popped frame then meets is
// Service::Handle, which kvstash_request_fuzzer covers. Built with the other
// fuzzers (-DKVSTASH_BUILD_FUZZERS=ON); scripts/fuzz.sh runs it briefly.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kvstash/shm_channel.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace kvstash::channel;
  constexpr uint64_t kRing = kMinRingBytes;
  // The segment on the heap, exactly as large as declared: ASan reports any
  // byte read or written past it.
  std::vector<uint8_t> segment(SegmentBytes(kRing, kRing));
  Ring ring = RequestRing(segment.data(), kRing);
  uint64_t start = 0;
  if (size >= 8) {
    std::memcpy(&start, data, 8);  // the consumer's head when it attached
    data += 8;
    size -= 8;
  }
  ring.position = start;
  uint64_t tail = start;
  if (size >= 8) {
    std::memcpy(&tail, data, 8);
    tail = start + (tail % (2 * kRing));  // often plausible, sometimes not
    data += 8;
    size -= 8;
  }
  std::memcpy(ring.data, data, size < kRing ? size : kRing);
  StoreWord64(ring.tail_word(), tail);
  std::vector<uint8_t> out(MaxFrame(kRing));
  for (int i = 0; i < 1024; ++i) {
    uint32_t got = 0;
    const RingResult result = ring.Pop(out.data(), out.size(), &got);
    if (result != RingResult::kOk) break;
    if (got > out.size() || ring.position - start > 2 * kRing) __builtin_trap();
  }
  return 0;
}
