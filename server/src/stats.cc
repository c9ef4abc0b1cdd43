// Counter snapshots and latency histograms.
#include "stats.h"

namespace kvstash::server {

const char* RequestKindName(RequestKind kind) {
  static constexpr const char* kNames[] = {"hello",  "register_kv", "unregister_kv", "store",
                                           "retrieve", "lookup",    "release",       "clear",
                                           "describe", "stats",     "ping"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(RequestKind::kCount));
  return kNames[size_t(kind)];
}

#define KVSTASH_READ_COUNTER(name, help) \
  out.push_back(Stats::Counter{#name, help, name.load(std::memory_order_relaxed)});

std::vector<Stats::Counter> Stats::ReadCounters() const {
  std::vector<Counter> out;
  KVSTASH_COUNTERS(KVSTASH_READ_COUNTER)
  return out;
}

std::vector<Stats::Counter> RegistrationStats::ReadCounters() const {
  std::vector<Stats::Counter> out;
  KVSTASH_REGISTRATION_COUNTERS(KVSTASH_READ_COUNTER)
  return out;
}

#undef KVSTASH_READ_COUNTER

}  // namespace kvstash::server
