// The key index over the L1 pool: which chunk lives in which slot, in which
// scope, with LRU eviction, lookup leases and read/write pins.
//
// A chunk is Writing from BeginStore until CommitStore (invisible to Lookup
// and Retrieve), then Ready. A chunk that is Writing, being read or leased is
// never evicted or cleared, and is not in the LRU list while so: eviction
// takes the list's front, O(1) per chunk however much of the pool is pinned.
// Capacity is the pool's; allocation fails only when no evictable chunk
// remains.
//
// A lease belongs to the connection that took it (Release by anyone else is
// "unknown lease"); lease ids are random. Leases are bounded per owner and in
// total, and leased bytes to a share of the pool, so one client cannot pin
// the pool and starve every other store.
//
// Thread-safe: one mutex guards everything (the frontend reserves and looks
// up, transfer workers commit and unpin).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <list>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <set>
#include <utility>
#include <string>
#include <unordered_map>
#include <vector>

#include "chunk_key_hash.h"
#include "kvstash/keys.h"
#include "kvstash/status.h"
#include "kvstash/thread_annotations.h"
#include "l1_pool.h"
#include "stats.h"

namespace kvstash::server {

using ScopeId = uint32_t;
using Clock = std::chrono::steady_clock;

class ChunkStore {
 public:
  struct Entry;  // opaque to callers; a handle stays valid while pinned

  enum class Reservation { kReserved, kAlreadyPresent, kNoRoom };
  struct StoreTicket {
    Reservation result = Reservation::kNoRoom;
    Entry* entry = nullptr;     // with kReserved
    uint8_t* slot = nullptr;    // with kReserved: chunk_bytes to fill
  };
  struct ReadTicket {
    Entry* entry = nullptr;
    const uint8_t* slot = nullptr;
    uint32_t num_tokens = 0;
  };
  struct LookupResult {
    uint32_t hit_chunks = 0;
    uint64_t hit_tokens = 0;
    uint64_t lease_id = 0;
    Status refused;  // ResourceExhausted when a lease limit refused it
  };

  struct LeaseLimits {
    uint64_t per_owner = 0;    // leases one owner may hold; 0 = unbounded
    uint64_t total = 0;        // leases held by everyone; 0 = unbounded
    uint64_t leased_bytes = 0; // bytes of leased chunks; 0 = unbounded
  };
  ChunkStore(L1Pool& pool, Stats& stats) : ChunkStore(pool, stats, LeaseLimits()) {}
  ChunkStore(L1Pool& pool, Stats& stats, LeaseLimits limits);
  ~ChunkStore();

  // Reserves a slot (evicting if needed) for a new chunk, or reports it
  // present (Ready or Writing) or that no room can be made.
  StoreTicket BeginStore(ScopeId scope, const ChunkKey& key, uint64_t chunk_bytes);
  // Publishes a reserved chunk with its token count; Lookup sees it from now.
  void CommitStore(Entry* entry, uint32_t num_tokens);
  // Drops a reservation whose copy failed; the slot is freed.
  void AbortStore(Entry* entry);

  // Pins a Ready chunk for reading; nullopt when absent or still Writing.
  std::optional<ReadTicket> BeginRead(ScopeId scope, const ChunkKey& key);
  void EndRead(Entry* entry);

  // Longest prefix of `keys` that is Ready; leases it for `lease` when any.
  // A chunk of fewer than chunk_tokens tokens ends the prefix. The prefix
  // stops where the leased-bytes budget would be exceeded; past the per-owner
  // or total lease count, `refused` says so and nothing is leased.
  LookupResult Lookup(ScopeId scope, const std::vector<ChunkKey>& keys,
                      uint32_t chunk_tokens, std::chrono::milliseconds lease,
                      const std::string& owner = {});
  // Ends a lease of `owner`; returns the chunks it held, or nullopt if
  // unknown, expired or another owner's.
  std::optional<uint32_t> Release(uint64_t lease_id, const std::string& owner = {});
  // Ends leases whose time has passed.
  void ExpireLeases(Clock::time_point now);

  // Drops every unpinned Ready chunk whose scope `matches`; returns how many.
  uint64_t Clear(const std::function<bool(ScopeId)>& matches);

  struct Usage {
    uint64_t chunks = 0;
    uint64_t leases = 0;
    uint64_t used_bytes = 0;
    uint64_t capacity_bytes = 0;
    uint64_t leased_bytes = 0;
  };
  Usage usage() const;

 private:
  struct ScopedKey {
    ScopeId scope;
    ChunkKey key;
    bool operator==(const ScopedKey& o) const { return scope == o.scope && key == o.key; }
  };
  struct ScopedKeyHash {
    ChunkKeyHash hash;
    size_t operator()(const ScopedKey& k) const;
  };
  struct Lease {
    Clock::time_point expires;
    std::string owner;
    std::vector<Entry*> entries;
  };
  using Index = std::unordered_map<ScopedKey, std::unique_ptr<Entry>, ScopedKeyHash>;

  bool Evictable(const Entry& e) const;
  void EraseLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  std::optional<L1Pool::Slot> AllocateLocked(uint64_t chunk_bytes) KVSTASH_REQUIRES(mutex_);
  void TouchLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  void EndLeaseLocked(Lease& lease) KVSTASH_REQUIRES(mutex_);
  // Pins and unpins: an entry leaves the LRU list while it is not evictable.
  void PinLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  void UnpinLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);

  L1Pool& pool_;
  Stats& stats_;
  mutable Mutex mutex_;
  Index index_ KVSTASH_GUARDED_BY(mutex_);
  std::list<Entry*> lru_ KVSTASH_GUARDED_BY(mutex_);                                 // front = oldest
  std::unordered_map<uint64_t, Lease> leases_ KVSTASH_GUARDED_BY(mutex_);
  std::set<std::pair<Clock::time_point, uint64_t>> by_expiry_ KVSTASH_GUARDED_BY(mutex_);
  std::unordered_map<std::string, uint64_t> leases_of_ KVSTASH_GUARDED_BY(mutex_);
  uint64_t leased_bytes_ KVSTASH_GUARDED_BY(mutex_) = 0;
  const LeaseLimits limits_;
  std::mt19937_64 random_ids_ KVSTASH_GUARDED_BY(mutex_);
};

}  // namespace kvstash::server
