// A latency histogram with fixed bucket bounds in microseconds, cumulative
// when exported, as Prometheus expects. One definition for the daemon's
// request latencies and the tiers' operation latencies, so that every
// latency kvstash reports has the same buckets. Thread-safe: relaxed atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>

namespace kvstash {

class LatencyHistogram {
 public:
  static constexpr std::array<uint64_t, 14> kBoundsUs = {
      25, 50, 100, 250, 500, 1000, 2500, 5000, 10000, 25000, 50000, 100000, 250000, 1000000};
  void Record(uint64_t micros);
  struct Snapshot {
    std::array<uint64_t, kBoundsUs.size() + 1> buckets{};  // last: +Inf
    uint64_t count = 0;
    uint64_t sum_us = 0;
    uint64_t Percentile(double q) const;  // upper bound of the bucket holding q
  };
  Snapshot Read() const;

 private:
  std::array<std::atomic<uint64_t>, kBoundsUs.size() + 1> buckets_{};
  std::atomic<uint64_t> count_{0};
  std::atomic<uint64_t> sum_us_{0};
};

}  // namespace kvstash
