// The shared-memory channel's ring (kvstash/shm_channel.h) in one process:
// frames come out as they went in, across the ring's end; a full ring says
// so; positions or headers that cannot be are Corrupt, never a read outside.
#include "kvstash/shm_channel.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

namespace kvstash::channel {
namespace {

struct Segment {
  explicit Segment(uint64_t ring) : words(SegmentBytes(ring, ring) / 8, 0) {
    producer = RequestRing(base(), ring);
    consumer = RequestRing(base(), ring);
  }
  uint8_t* base() { return reinterpret_cast<uint8_t*>(words.data()); }
  std::vector<uint64_t> words;
  Ring producer, consumer;  // two views of one ring, as in two processes
};

std::vector<uint8_t> Frame(uint32_t size, uint8_t seed) {
  std::vector<uint8_t> bytes(size);
  for (uint32_t i = 0; i < size; ++i) bytes[i] = uint8_t(seed + i * 7);
  return bytes;
}

TEST(ShmChannelRing, FramesComeOutInOrderAcrossTheRingsEnd) {
  Segment s(kMinRingBytes);
  std::vector<uint8_t> out(kMinRingBytes);
  uint32_t size = 0;
  for (int i = 0; i < 500; ++i) {  // ~40 times round the ring
    const auto a = Frame(1 + i % 300, uint8_t(i));
    const auto b = Frame(77, uint8_t(i + 1));
    ASSERT_EQ(s.producer.Push(a.data(), uint32_t(a.size())), RingResult::kOk);
    ASSERT_EQ(s.producer.Push(b.data(), uint32_t(b.size())), RingResult::kOk);
    ASSERT_TRUE(s.consumer.MaybeReady());
    ASSERT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kOk);
    ASSERT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + size), a);
    ASSERT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kOk);
    ASSERT_EQ(std::vector<uint8_t>(out.begin(), out.begin() + size), b);
    ASSERT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kEmpty);
  }
}

TEST(ShmChannelRing, AFullRingRefusesUntilTheConsumerFreesRoom) {
  Segment s(kMinRingBytes);
  const auto frame = Frame(1000, 3);  // 1008 ring bytes: four fit in 4096
  for (int i = 0; i < 4; ++i) ASSERT_EQ(s.producer.Push(frame.data(), 1000), RingResult::kOk);
  EXPECT_EQ(s.producer.Push(frame.data(), 1000), RingResult::kFull);
  std::vector<uint8_t> out(kMinRingBytes);
  uint32_t size = 0;
  ASSERT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kOk);
  EXPECT_EQ(s.producer.Push(frame.data(), 1000), RingResult::kOk);
  // Larger than a quarter ring: never in the ring.
  const auto big = Frame(uint32_t(MaxFrame(kMinRingBytes) + 1), 1);
  Segment empty(kMinRingBytes);
  EXPECT_EQ(empty.producer.Push(big.data(), uint32_t(big.size())), RingResult::kFull);
}

TEST(ShmChannelRing, ImpossibleWordsAreCorruptNotRead) {
  std::vector<uint8_t> out(kMinRingBytes);
  uint32_t size = 0;
  {  // a tail more than a ring ahead
    Segment s(kMinRingBytes);
    StoreWord64(s.producer.tail_word(), 2 * kMinRingBytes);
    EXPECT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kCorrupt);
  }
  {  // a tail not on a frame boundary
    Segment s(kMinRingBytes);
    StoreWord64(s.producer.tail_word(), 12);
    EXPECT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kCorrupt);
  }
  {  // a header whose check word disagrees
    Segment s(kMinRingBytes);
    const auto frame = Frame(40, 1);
    ASSERT_EQ(s.producer.Push(frame.data(), 40), RingResult::kOk);
    const uint32_t bad[2] = {40, 0};
    s.producer.CopyIn(0, bad, sizeof(bad));
    EXPECT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kCorrupt);
  }
  {  // a length beyond what is published
    Segment s(kMinRingBytes);
    const auto frame = Frame(40, 1);
    ASSERT_EQ(s.producer.Push(frame.data(), 40), RingResult::kOk);
    const uint32_t longer[2] = {400, ~400u};
    s.producer.CopyIn(0, longer, sizeof(longer));
    EXPECT_EQ(s.consumer.Pop(out.data(), out.size(), &size), RingResult::kCorrupt);
  }
  {  // a consumer head the producer cannot have left room for
    Segment s(kMinRingBytes);
    StoreWord64(s.consumer.head_word(), 5 * kMinRingBytes);
    const auto frame = Frame(8, 1);
    EXPECT_EQ(s.producer.Push(frame.data(), 8), RingResult::kCorrupt);
  }
}

}  // namespace
}  // namespace kvstash::channel
