// Counters of one tier, declared once (the X-macro of server/src/stats.h):
// the struct, ReadCounters() for `kvstash stats` and the metrics endpoint are
// generated from KVSTASH_TIER_COUNTERS. Thread-safe: relaxed atomics.
#pragma once

#include <array>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "kvstash/runtime/latency_histogram.h"

namespace kvstash::tiers {

// X(name, help). Counters only go up.
#define KVSTASH_TIER_COUNTERS(X)                                                    \
  X(put_chunks, "chunks written to the tier")                                       \
  X(put_bytes, "payload bytes written to the tier")                                 \
  X(put_already_present, "chunks a put found already stored")                       \
  X(put_errors, "puts that failed (I/O error, timeout, no room, tier unavailable)") \
  X(get_hits, "chunks read back and verified")                                      \
  X(get_misses, "chunks asked for that the tier did not hold")                      \
  X(get_bytes, "payload bytes read back")                                           \
  X(get_errors, "gets that failed (I/O error, timeout, tier unavailable)")          \
  X(corrupt_chunks, "chunks dropped for failing a header or checksum check")        \
  X(contains_requests, "ids asked for by Contains")                                 \
  X(removed_chunks, "chunks removed on request")                                    \
  X(evicted_chunks, "chunks evicted to make room")                                  \
  X(evicted_bytes, "payload bytes of evicted chunks")                               \
  X(breaker_opens, "times a circuit breaker opened after repeated failures")        \
  X(breaker_rejections, "calls refused at once because a circuit breaker was open")

// Latency of tier operations in microseconds, fixed buckets (the same bounds
// as the daemon's request histogram), cumulative when exported.
using TierLatency = LatencyHistogram;

class TierStats {
 public:
#define KVSTASH_DECLARE_TIER_COUNTER(name, help) std::atomic<uint64_t> name{0};
  KVSTASH_TIER_COUNTERS(KVSTASH_DECLARE_TIER_COUNTER)
#undef KVSTASH_DECLARE_TIER_COUNTER

  static void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }

  TierLatency put_latency;  // one chunk's write, queueing excluded
  TierLatency get_latency;  // one chunk's read and verification

  struct Counter {
    const char* name;
    const char* help;
    uint64_t value;
  };
  std::vector<Counter> ReadCounters() const;
};

}  // namespace kvstash::tiers
