// The tiers below L1 as the daemon uses them: L2 on local disk (DiskTier,
// --l2-path) and L3 on Redis / Valkey (RedisTier, --l3-redis), built from
// the config. It writes chunks behind L1 (the chunk store's write-behind
// hook), finds the continuation of a lookup's L1 prefix in L2 then L3,
// keeps leased L2 chunks readable (DiskTier pins), and promotes chunks from
// L2 or L3 into reserved L1 slots for Retrieve and for prefetch.
//
// Chunks keep their L1 scope below L1: a tier's ChunkId is the scope's
// namespace id (model, tenant salt, layout, rank) and the key.
//
// Thread-safe. Calls return at once; the work and its callbacks run on the
// tiers' threads. Shutdown() (before the chunk store and the service's
// parts go) drains the tiers; calls after it fail at once.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <nlohmann/json_fwd.hpp>
#include <shared_mutex>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "chunk_store.h"
#include "kvstash/config/server_config.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/tiers/disk_tier.h"
#include "kvstash/tiers/redis_tier.h"
#include "stats.h"

namespace kvstash::server {

class TierChain {
 public:
  // No tier configured: a chain that holds nothing (enabled() false).
  static Result<std::unique_ptr<TierChain>> Create(const config::ServerConfig& config,
                                                   ChunkStore& store, Stats& stats);
  ~TierChain();

  bool enabled() const { return l2_ != nullptr || l3_ != nullptr; }
  bool has_l3() const { return l3_ != nullptr; }
  // Drains the tiers; from now on every call fails at once.
  void Shutdown();

  // What a scope is called below L1; the registry's scopes, added as they
  // are interned (a chunk of a scope not added is never written below).
  void AddScope(ScopeId scope, const ChunkKey& namespace_id, const Fingerprint& layout);

  // The chunk store's write-behind hook: writes the chunks to L2 and L3,
  // then EndFlush on each.
  void Flush(std::vector<ChunkStore::Flush> flushes);

  // The part of a lookup below L1, for `keys` past the L1 prefix.
  struct Continuation {
    std::vector<TierLevel> levels;  // per hit, in order
    uint64_t hit_tokens = 0;
    bool ended_at_miss = false;          // the next key was absent (L3 may continue)
    std::vector<tiers::ChunkId> pinned;  // L2 hits, pinned until Unpin
  };
  // The prefix of `keys` in L2, each hit pinned (answered from the index,
  // at once). A chunk of fewer than chunk_tokens tokens ends it; one whose
  // header says more (or none) is not this registration's and is a miss.
  Continuation FindInL2(const ChunkKey& namespace_id, const std::vector<ChunkKey>& keys,
                        uint32_t chunk_tokens);
  // The prefix of `keys` in L3; `done` runs on a tier thread.
  void FindInL3(const ChunkKey& namespace_id, std::vector<ChunkKey> keys, uint32_t chunk_tokens,
                std::function<void(Continuation)> done);
  void UnpinL2(const std::vector<tiers::ChunkId>& ids);

  // Brings `keys` of a scope from L2 (else L3) into reserved L1 slots;
  // `done` runs once all have landed or failed (a chunk already in L1, or
  // without room, is left as it is). Chunks failing their checks are
  // dropped below and stay missing. The chunks that landed are held (read
  // pins) until `done` returns, so later ones never evict earlier ones.
  struct Scope {
    ScopeId scope = 0;
    ChunkKey namespace_id{};
    Fingerprint layout{};
    uint64_t chunk_bytes = 0;
    uint32_t chunk_tokens = 0;  // a promoted chunk's header may say no more
  };
  void Promote(const Scope& scope, std::vector<ChunkKey> keys, std::function<void()> done);
  // How many of `keys` are being promoted now.
  uint32_t Promoting(const ChunkKey& namespace_id, const std::vector<ChunkKey>& keys) const;

  // Appends each tier's entry to describe's "tiers" array: name, kind,
  // capacity, use, counters, and for L2 what the last restart found.
  void Describe(nlohmann::json& tiers) const;
  // Each tier's usage, counters and latency, for stats and metrics.
  std::vector<TierSnapshot> ReadStats() const;

 private:
  struct Promotion;
  TierChain(ChunkStore& store, Stats& stats, ChunkStore::WriteBehind mode);
  // Promote, `tries` more times for chunks that found no room in L1 (every
  // slot pinned while being written below): each try waits for a write to end.
  struct Held;
  void PromoteTry(const Scope& scope, std::vector<ChunkKey> keys, std::function<void()> done,
                  int tries, std::shared_ptr<Held> held);
  // Brings the reserved slots of `p` up from L2, else L3.
  void Land(const std::shared_ptr<Promotion>& p);
  // Runs `retry` once a write below ends (false: none in flight).
  bool WhenAWriteEnds(std::function<void()> retry);
  void FinishPromotion(const std::shared_ptr<Promotion>& p, size_t i, bool landed,
                       uint32_t num_tokens);
  void PromoteFromL3(const std::shared_ptr<Promotion>& p, std::vector<size_t> items);

  ChunkStore& store_;
  Stats& stats_;
  const ChunkStore::WriteBehind mode_;

  mutable Mutex scopes_mutex_;
  std::unordered_map<ScopeId, Scope> scopes_ KVSTASH_GUARDED_BY(scopes_mutex_);

  Mutex writes_mutex_;
  uint64_t writes_in_flight_ KVSTASH_GUARDED_BY(writes_mutex_) = 0;
  std::vector<std::function<void()>> write_waiters_ KVSTASH_GUARDED_BY(writes_mutex_);

  mutable Mutex promoting_mutex_;
  std::unordered_set<tiers::ChunkId, tiers::ChunkIdHash> promoting_
      KVSTASH_GUARDED_BY(promoting_mutex_);

  // Held shared by every call into a tier, exclusively by Shutdown while
  // it marks the chain stopped; the tiers go only after.
  mutable std::shared_mutex life_;
  bool stopping_ = false;  // under life_ (a shared_mutex: not annotated)
  std::unique_ptr<tiers::DiskTier> l2_;
  std::unique_ptr<tiers::RedisTier> l3_;
};

}  // namespace kvstash::server
