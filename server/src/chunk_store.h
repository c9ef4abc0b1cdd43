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
// Write-behind to the tiers below L1 (L2, L3): a chunk is written there
// either right after its store commits (write-through) or when eviction
// picks it (on-eviction). While its bytes are being written the chunk is
// pinned (flushing); it reads as usual. On eviction a chunk not yet written
// below is never dropped: it is sent to be written and the next clean
// chunk is evicted instead, so a store's reply never waits for a tier.
//
// A lease may also hold chunks of the tiers below (AttachLower): their
// holder's `on_end` runs when the lease ends.
//
// Thread-safe: one mutex guards everything (the frontend reserves and looks
// up, transfer workers commit and unpin). Hooks run outside the lock.
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
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "chunk_key_hash.h"
#include "kvstash/keys.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"
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
    Entry* entry = nullptr;   // with kReserved
    uint8_t* slot = nullptr;  // with kReserved: chunk_bytes to fill
    uint32_t slab = 0;        // with kReserved: the slot's L1 slab
  };
  struct ReadTicket {
    Entry* entry = nullptr;
    const uint8_t* slot = nullptr;
    uint32_t num_tokens = 0;
    uint32_t slab = 0;  // the slot's L1 slab
  };
  struct LookupResult {
    uint32_t hit_chunks = 0;
    uint64_t hit_tokens = 0;
    uint64_t lease_id = 0;
    Status refused;  // ResourceExhausted when a lease limit refused it
    // The prefix ended at a key absent from L1 (not at a partial chunk, the
    // leased-bytes budget or the last key): lower tiers may continue it.
    bool ended_at_miss = false;
    // The prefix ended at the leased-bytes budget, before a stored key.
    bool lease_truncated = false;
  };

  // A chunk to write below L1; its slot stays pinned until EndFlush.
  struct Flush {
    Entry* entry = nullptr;
    ScopeId scope = 0;
    ChunkKey key{};
    const uint8_t* data = nullptr;
    uint64_t bytes = 0;
    uint32_t num_tokens = 0;
  };
  enum class WriteBehind { kNone, kWriteThrough, kOnEviction };
  using FlushHook = std::function<void(std::vector<Flush>)>;

  struct LeaseLimits {
    uint64_t per_owner = 0;     // leases one owner may hold; 0 = unbounded
    uint64_t total = 0;         // leases held by everyone; 0 = unbounded
    uint64_t leased_bytes = 0;  // bytes of leased chunks; 0 = unbounded
  };
  ChunkStore(L1Pool& pool, Stats& stats) : ChunkStore(pool, stats, LeaseLimits()) {}
  ChunkStore(L1Pool& pool, Stats& stats, LeaseLimits limits);
  ~ChunkStore();

  // Where chunks go below L1; before any store. kNone: eviction drops them.
  void SetWriteBehind(WriteBehind mode, FlushHook hook);
  // A Flush finished (written or not: either way the slot may go now).
  void EndFlush(Entry* entry, bool written);

  // Reserves a slot (evicting if needed) for a new chunk, or reports it
  // present (Ready or Writing) or that no room can be made.
  StoreTicket BeginStore(ScopeId scope, const ChunkKey& key, uint64_t chunk_bytes);
  // Publishes a reserved chunk with its token count; Lookup sees it from now.
  // `clean`: its bytes are already below L1 (a promotion), nothing to write.
  void CommitStore(Entry* entry, uint32_t num_tokens, bool clean = false);
  // Drops a reservation whose copy failed; the slot is freed.
  void AbortStore(Entry* entry);

  // Pins a Ready chunk for reading; nullopt when absent or still Writing.
  std::optional<ReadTicket> BeginRead(ScopeId scope, const ChunkKey& key);
  void EndRead(Entry* entry);
  // Whether the chunk is in L1 and Ready.
  bool Ready(ScopeId scope, const ChunkKey& key) const;

  // Longest prefix of `keys` that is Ready; leases it for `lease` when any.
  // A chunk of fewer than chunk_tokens tokens ends the prefix. The prefix
  // stops where the leased-bytes budget would be exceeded; past the per-owner
  // or total lease count, `refused` says so and nothing is leased.
  LookupResult Lookup(ScopeId scope, const std::vector<ChunkKey>& keys, uint32_t chunk_tokens,
                      std::chrono::milliseconds lease, const std::string& owner = {});
  // Ends a lease of `owner`; returns the chunks it held, or nullopt if
  // unknown, expired or another owner's.
  std::optional<uint32_t> Release(uint64_t lease_id, const std::string& owner = {});
  // Adds `chunks` of lower tiers to lease `lease_id` (or, with 0, to a new
  // lease of `owner` for `lease`); `on_end` runs once when it ends. Returns
  // the lease id, 0 when `lease_id` is no longer held (`on_end` ran).
  uint64_t AttachLower(uint64_t lease_id, const std::string& owner, std::chrono::milliseconds lease,
                       uint32_t chunks, std::function<void()> on_end);
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
    uint32_t lower_chunks = 0;
    std::vector<std::function<void()>> on_end;
  };
  using Index = std::unordered_map<ScopedKey, std::unique_ptr<Entry>, ScopedKeyHash>;

  bool Evictable(const Entry& e) const;
  StoreTicket BeginStoreLocked(ScopeId scope, const ChunkKey& key, uint64_t chunk_bytes)
      KVSTASH_REQUIRES(mutex_);
  void EraseLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  std::optional<L1Pool::Slot> AllocateLocked(uint64_t chunk_bytes) KVSTASH_REQUIRES(mutex_);
  void TouchLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  // Appends what must run once the lock is released to `after`.
  void EndLeaseLocked(Lease& lease, std::vector<std::function<void()>>* after)
      KVSTASH_REQUIRES(mutex_);
  uint64_t NewLeaseIdLocked() KVSTASH_REQUIRES(mutex_);
  // Pins and unpins: an entry leaves the LRU list while it is not evictable.
  // `oldest`: back at the front of the list (first to go), not the end.
  void PinLocked(Entry* entry) KVSTASH_REQUIRES(mutex_);
  void UnpinLocked(Entry* entry, bool oldest = false) KVSTASH_REQUIRES(mutex_);
  // Eviction's choice of `e`: true when it was erased; false when it must
  // first be written below L1 (queued on pending_flushes_ and pinned, when
  // `may_flush`; otherwise left for a later call).
  bool EvictLocked(Entry* e, bool may_flush) KVSTASH_REQUIRES(mutex_);
  Flush FlushOfLocked(Entry* e) KVSTASH_REQUIRES(mutex_);
  // Hands pending_flushes_ to the hook; called without the lock.
  void RunFlushes(std::vector<Flush> flushes);

  L1Pool& pool_;
  Stats& stats_;
  mutable Mutex mutex_;
  Index index_ KVSTASH_GUARDED_BY(mutex_);
  std::list<Entry*> lru_ KVSTASH_GUARDED_BY(mutex_);  // front = oldest
  std::unordered_map<uint64_t, Lease> leases_ KVSTASH_GUARDED_BY(mutex_);
  std::set<std::pair<Clock::time_point, uint64_t>> by_expiry_ KVSTASH_GUARDED_BY(mutex_);
  std::unordered_map<std::string, uint64_t> leases_of_ KVSTASH_GUARDED_BY(mutex_);
  uint64_t leased_bytes_ KVSTASH_GUARDED_BY(mutex_) = 0;
  const LeaseLimits limits_;
  WriteBehind write_behind_ = WriteBehind::kNone;  // set before any store
  FlushHook flush_hook_;
  std::vector<Flush> pending_flushes_ KVSTASH_GUARDED_BY(mutex_);
  std::mt19937_64 random_ids_ KVSTASH_GUARDED_BY(mutex_);
};

}  // namespace kvstash::server
