// The daemon's counters, declared once (memcached's X-macro idea: "no longer
// have to add new stats in 3+ places"): the struct, the Stats reply, the JSON
// and the metrics endpoint are all generated from KVSTASH_COUNTERS and
// KVSTASH_REGISTRATION_COUNTERS. StatsSnapshot is what both readers render.
// Thread-safe: every field is a relaxed atomic.
#pragma once

#include <array>
#include <atomic>
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "kvstash/runtime/latency_histogram.h"

namespace kvstash::server {

// X(name, help). Counters only go up.
#define KVSTASH_COUNTERS(X)                                                            \
  X(requests, "requests received (well-formed or not)")                                \
  X(request_errors, "requests answered with an error reply")                           \
  X(malformed_messages, "messages that failed verification")                           \
  X(registrations, "RegisterKV requests that succeeded")                               \
  X(unregistrations, "UnregisterKV requests that succeeded")                           \
  X(registrations_dropped, "registrations dropped because their engine went silent")   \
  X(store_chunks_stored, "chunks copied into L1")                                      \
  X(store_chunks_already_present, "chunks a Store found already stored")               \
  X(store_chunks_no_room, "chunks a Store skipped for lack of room")                   \
  X(store_chunks_failed, "chunks whose store copy failed")                             \
  X(store_tokens, "tokens stored")                                                     \
  X(store_bytes, "bytes copied into L1")                                               \
  X(retrieve_chunks, "chunks copied back to engine memory")                            \
  X(retrieve_chunks_missing, "chunks a Retrieve asked for that were not stored")       \
  X(retrieve_chunks_failed, "chunks whose retrieve copy failed")                       \
  X(retrieve_tokens, "tokens written back to engine memory")                           \
  X(retrieve_bytes, "bytes copied out of L1")                                          \
  X(lookup_requests, "Lookup requests")                                                \
  X(lookup_keys, "keys asked for by Lookup")                                           \
  X(lookup_hit_chunks, "chunks found by Lookup (the stored prefix)")                   \
  X(lookup_miss_chunks, "keys past the stored prefix")                                 \
  X(lookup_hit_tokens, "tokens found by Lookup")                                       \
  X(leases_granted, "lookup leases granted")                                           \
  X(leases_released, "leases ended by Release or Retrieve")                            \
  X(leases_expired, "leases that ran out")                                             \
  X(leases_truncated, "Lookups whose leased prefix the leased-bytes budget cut short") \
  X(requests_timed_out, "requests not started because their deadline had passed")      \
  X(chunks_timed_out, "chunks not copied because their request's deadline passed")     \
  X(requests_refused_busy, "requests refused: the client had too many in flight")      \
  X(evicted_chunks, "chunks evicted to make room")                                     \
  X(evicted_bytes, "bytes of evicted chunks")                                          \
  X(cleared_chunks, "chunks dropped by Clear")                                         \
  X(lookup_hit_chunks_l2, "chunks of Lookup prefixes found in L2 (local disk)")        \
  X(lookup_hit_chunks_l3, "chunks of Lookup prefixes found in L3 (Redis)")             \
  X(prefetch_chunks, "L2/L3 chunks a Lookup asked to promote into L1 ahead")           \
  X(promoted_chunks, "chunks read from L2 or L3 into L1")                              \
  X(promote_failed, "chunks that could not be promoted (gone, corrupt, no room)")      \
  X(write_behind_chunks, "chunks sent to be written below L1")                         \
  X(write_behind_failed, "chunks that no tier below L1 took")                          \
  X(peer_budget_refusals,                                                              \
    "registrations and channels refused: their process or user "                       \
    "held its limit")                                                                  \
  X(requests_out_of_memory,                                                            \
    "requests answered ResourceExhausted: memory ran out while "                       \
    "handling them")                                                                   \
  X(frontend_spin_us,                                                                  \
    "CPU microseconds the frontend spent polling without sleeping and "                \
    "finding nothing (its spin windows)")

// X(name, help). The frontend's own counters (FrontendStats), kept by the
// frontend thread. A name that KVSTASH_COUNTERS has too counts the same
// events seen by the frontend (a message it refused, a channel over a
// peer's budget): the two are read as one sum.
#define KVSTASH_FRONTEND_COUNTERS(X)                                                \
  X(request_errors, "requests answered with an error reply")                        \
  X(peer_budget_refusals,                                                           \
    "registrations and channels refused: their process or user "                    \
    "held its limit")                                                               \
  X(channel_requests, "requests read from shared-memory channels (not the socket)") \
  X(channel_doorbells, "wake-ups of the frontend by the channels' doorbell")        \
  X(channels_attached, "shared-memory channels attached")                           \
  X(channels_detached,                                                              \
    "shared-memory channels detached (closed, broken, or their client "             \
    "gone)")

// X(name, help): one registration's share of the traffic. Lookup misses are
// counted in chunks only: a Lookup sends keys, not the prompt's length, so the
// number of tokens past the stored prefix is unknown.
#define KVSTASH_REGISTRATION_COUNTERS(X)                                                    \
  X(store_chunks, "chunks the registration copied into L1")                                 \
  X(store_tokens, "tokens the registration stored")                                         \
  X(store_bytes, "bytes the registration copied into L1")                                   \
  X(retrieve_chunks, "chunks copied back to the registration's memory")                     \
  X(retrieve_tokens, "tokens written back to the registration's memory")                    \
  X(retrieve_bytes, "bytes copied out of L1 into the registration's memory")                \
  X(lookup_hit_chunks, "chunks the registration's Lookups found")                           \
  X(lookup_miss_chunks, "keys the registration's Lookups asked for past the stored prefix") \
  X(lookup_hit_tokens, "tokens the registration's Lookups found")

enum class RequestKind : uint8_t {
  kHello,
  kRegisterKV,
  kUnregisterKV,
  kStore,
  kRetrieve,
  kLookup,
  kRelease,
  kClear,
  kDescribe,
  kStats,
  kPing,
  kCount
};
const char* RequestKindName(RequestKind kind);

class RegistrationStats;
class FrontendStats;

class Stats {
 public:
#define KVSTASH_DECLARE_COUNTER(name, help) std::atomic<uint64_t> name{0};
  KVSTASH_COUNTERS(KVSTASH_DECLARE_COUNTER)
#undef KVSTASH_DECLARE_COUNTER

  // Adds `n` to a counter; a shorthand for relaxed fetch_add.
  static void Add(std::atomic<uint64_t>& counter, uint64_t n = 1) {
    counter.fetch_add(n, std::memory_order_relaxed);
  }
  // One call per event: each counts it globally and for its registration
  // together.
  void ChunkStored(RegistrationStats& registration, uint64_t tokens, uint64_t bytes);
  void ChunkRetrieved(RegistrationStats& registration, uint64_t tokens, uint64_t bytes);
  void LookupAnswered(RegistrationStats& registration, uint64_t keys, uint64_t hit_chunks,
                      uint64_t hit_tokens);
  LatencyHistogram& latency(RequestKind kind) { return latency_[size_t(kind)]; }
  const LatencyHistogram& latency(RequestKind kind) const { return latency_[size_t(kind)]; }

  struct Counter {
    const char* name;
    const char* help;
    uint64_t value;
  };
  // KVSTASH_COUNTERS, and the frontend's counters when it counts too
  // (CountFrontend): a name in both lists is read as the sum of the two.
  std::vector<Counter> ReadCounters() const;
  // Set once, before serving; `frontend` outlives every reader.
  void CountFrontend(const FrontendStats* frontend) { frontend_ = frontend; }

 private:
  std::array<LatencyHistogram, size_t(RequestKind::kCount)> latency_;
  const FrontendStats* frontend_ = nullptr;
};

class FrontendStats {
 public:
#define KVSTASH_DECLARE_COUNTER(name, help) std::atomic<uint64_t> name{0};
  KVSTASH_FRONTEND_COUNTERS(KVSTASH_DECLARE_COUNTER)
#undef KVSTASH_DECLARE_COUNTER

  std::vector<Stats::Counter> ReadCounters() const;
};

class RegistrationStats {
 public:
#define KVSTASH_DECLARE_COUNTER(name, help) std::atomic<uint64_t> name{0};
  KVSTASH_REGISTRATION_COUNTERS(KVSTASH_DECLARE_COUNTER)
#undef KVSTASH_DECLARE_COUNTER

  std::vector<Stats::Counter> ReadCounters() const;
};

// A value that goes up and down, read when the snapshot is taken.
struct Gauge {
  const char* name;
  const char* help;
  uint64_t value;
};

// One tier below L1 (L2, L3): its usage, counters and operation latency.
struct TierSnapshot {
  std::string name;             // "l2-disk", "l3-redis"
  std::string level;            // "L2", "L3"
  uint64_t capacity_bytes = 0;  // 0: unknown (a shared store)
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
  std::vector<Stats::Counter> counters;  // KVSTASH_TIER_COUNTERS
  LatencyHistogram::Snapshot put_latency;
  LatencyHistogram::Snapshot get_latency;
};

// Everything `kvstash stats` and the metrics endpoint show, read at one
// moment by Service::ReadStats. Plain data.
struct StatsSnapshot {
  struct Registration {
    uint64_t id = 0;
    std::string model;
    uint32_t tp_rank = 0;
    std::vector<Stats::Counter> counters;  // KVSTASH_REGISTRATION_COUNTERS
    std::string owner;                     // the connection that holds it; never rendered
  };
  std::vector<Stats::Counter> counters;  // KVSTASH_COUNTERS
  std::vector<Gauge> gauges;
  std::array<LatencyHistogram::Snapshot, size_t(RequestKind::kCount)> latency{};
  std::vector<Registration> registrations;
  std::vector<TierSnapshot> tiers;
};

}  // namespace kvstash::server
