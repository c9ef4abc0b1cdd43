#include "kvstash/runtime/latency_histogram.h"

namespace kvstash {

void LatencyHistogram::Record(uint64_t micros) {
  size_t bucket = 0;
  while (bucket < kBoundsUs.size() && micros > kBoundsUs[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(micros, std::memory_order_relaxed);
}

LatencyHistogram::Snapshot LatencyHistogram::Read() const {
  Snapshot s;
  for (size_t i = 0; i < buckets_.size(); ++i)
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_us = sum_us_.load(std::memory_order_relaxed);
  return s;
}

uint64_t LatencyHistogram::Snapshot::Percentile(double q) const {
  uint64_t total = 0;
  for (uint64_t b : buckets) total += b;
  if (total == 0) return 0;
  const double target = q * double(total);
  uint64_t seen = 0;
  for (size_t i = 0; i < kBoundsUs.size(); ++i) {
    seen += buckets[i];
    if (double(seen) >= target) return kBoundsUs[i];
  }
  return kBoundsUs.back();
}

}  // namespace kvstash
