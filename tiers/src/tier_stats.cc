// TierStats::ReadCounters.
#include "kvstash/tiers/tier_stats.h"

namespace kvstash::tiers {

std::vector<TierStats::Counter> TierStats::ReadCounters() const {
  std::vector<Counter> out;
#define KVSTASH_READ_TIER_COUNTER(name, help) \
  out.push_back({#name, help, name.load(std::memory_order_relaxed)});
  KVSTASH_TIER_COUNTERS(KVSTASH_READ_TIER_COUNTER)
#undef KVSTASH_READ_TIER_COUNTER
  return out;
}

}  // namespace kvstash::tiers
