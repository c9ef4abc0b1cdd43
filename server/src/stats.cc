// Counter snapshots and latency histograms.
#include "stats.h"

#include <algorithm>
#include <cstring>

namespace kvstash::server {

const char* RequestKindName(RequestKind kind) {
  static constexpr const char* kNames[] = {"hello",    "register_kv", "unregister_kv", "store",
                                           "retrieve", "lookup",      "release",       "clear",
                                           "describe", "stats",       "ping"};
  static_assert(sizeof(kNames) / sizeof(kNames[0]) == size_t(RequestKind::kCount));
  return kNames[size_t(kind)];
}

#define KVSTASH_READ_COUNTER(name, help) \
  out.push_back(Stats::Counter{#name, help, name.load(std::memory_order_relaxed)});

std::vector<Stats::Counter> Stats::ReadCounters() const {
  std::vector<Counter> out;
  KVSTASH_COUNTERS(KVSTASH_READ_COUNTER)
  if (frontend_ == nullptr) return out;
  for (const Counter& counter : frontend_->ReadCounters()) {
    auto same = std::find_if(out.begin(), out.end(), [&](const Counter& c) {
      return std::strcmp(c.name, counter.name) == 0;
    });
    if (same != out.end()) {
      same->value += counter.value;
    } else {
      out.push_back(counter);
    }
  }
  return out;
}

std::vector<Stats::Counter> FrontendStats::ReadCounters() const {
  std::vector<Stats::Counter> out;
  KVSTASH_FRONTEND_COUNTERS(KVSTASH_READ_COUNTER)
  return out;
}

std::vector<Stats::Counter> RegistrationStats::ReadCounters() const {
  std::vector<Stats::Counter> out;
  KVSTASH_REGISTRATION_COUNTERS(KVSTASH_READ_COUNTER)
  return out;
}

#undef KVSTASH_READ_COUNTER

void Stats::ChunkStored(RegistrationStats& registration, uint64_t tokens, uint64_t bytes) {
  Add(store_chunks_stored);
  Add(store_tokens, tokens);
  Add(store_bytes, bytes);
  Add(registration.store_chunks);
  Add(registration.store_tokens, tokens);
  Add(registration.store_bytes, bytes);
}

void Stats::ChunkRetrieved(RegistrationStats& registration, uint64_t tokens, uint64_t bytes) {
  Add(retrieve_chunks);
  Add(retrieve_tokens, tokens);
  Add(retrieve_bytes, bytes);
  Add(registration.retrieve_chunks);
  Add(registration.retrieve_tokens, tokens);
  Add(registration.retrieve_bytes, bytes);
}

void Stats::LookupAnswered(RegistrationStats& registration, uint64_t keys, uint64_t hit_chunks,
                           uint64_t hit_tokens) {
  Add(lookup_requests);
  Add(lookup_keys, keys);
  Add(lookup_hit_chunks, hit_chunks);
  Add(lookup_miss_chunks, keys - hit_chunks);
  Add(lookup_hit_tokens, hit_tokens);
  Add(registration.lookup_hit_chunks, hit_chunks);
  Add(registration.lookup_miss_chunks, keys - hit_chunks);
  Add(registration.lookup_hit_tokens, hit_tokens);
}

}  // namespace kvstash::server
