// TierStats::ReadCounters and the latency histogram.
#include "kvstash/tiers/tier_stats.h"

namespace kvstash::tiers {

void TierLatency::Record(uint64_t micros) {
  size_t bucket = 0;
  while (bucket < kBoundsUs.size() && micros > kBoundsUs[bucket]) ++bucket;
  buckets_[bucket].fetch_add(1, std::memory_order_relaxed);
  count_.fetch_add(1, std::memory_order_relaxed);
  sum_us_.fetch_add(micros, std::memory_order_relaxed);
}

TierLatency::Snapshot TierLatency::Read() const {
  Snapshot s;
  for (size_t i = 0; i < buckets_.size(); ++i) {
    s.buckets[i] = buckets_[i].load(std::memory_order_relaxed);
  }
  s.count = count_.load(std::memory_order_relaxed);
  s.sum_us = sum_us_.load(std::memory_order_relaxed);
  return s;
}

std::vector<TierStats::Counter> TierStats::ReadCounters() const {
  std::vector<Counter> out;
#define KVSTASH_READ_TIER_COUNTER(name, help) \
  out.push_back({#name, help, name.load(std::memory_order_relaxed)});
  KVSTASH_TIER_COUNTERS(KVSTASH_READ_TIER_COUNTER)
#undef KVSTASH_READ_TIER_COUNTER
  return out;
}

}  // namespace kvstash::tiers
