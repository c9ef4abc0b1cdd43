// Index, LRU, leases and pins over the L1 pool.
#include "chunk_store.h"

#include <cstring>
#include <random>

namespace kvstash::server {

struct ChunkStore::Entry {
  ScopedKey id;
  L1Pool::Slot slot;
  uint64_t bytes = 0;
  uint32_t num_tokens = 0;
  bool writing = true;
  bool clean = false;     // its bytes are below L1 too (or need not be)
  bool flushing = false;  // being written below L1: pinned
  uint32_t readers = 0;
  uint32_t leases = 0;
  std::list<Entry*>::iterator lru;  // valid while in the LRU list (evictable)
  bool in_lru = false;
};

size_t ChunkStore::ScopedKeyHash::operator()(const ScopedKey& k) const {
  return hash(k.scope, k.key);
}

ChunkStore::ChunkStore(L1Pool& pool, Stats& stats, LeaseLimits limits)
    : pool_(pool),
      stats_(stats),
      index_(0, ScopedKeyHash{ChunkKeyHash((uint64_t(std::random_device{}()) << 32) |
                                           std::random_device{}())}),
      limits_(limits) {
  std::random_device seed;
  std::seed_seq seq{seed(), seed(), seed(), seed(), seed(), seed(), seed(), seed()};
  random_ids_.seed(seq);
}

ChunkStore::~ChunkStore() = default;

bool ChunkStore::Evictable(const Entry& e) const {
  return !e.writing && !e.flushing && e.readers == 0 && e.leases == 0;
}

void ChunkStore::SetWriteBehind(WriteBehind mode, FlushHook hook) {
  MutexLock lock(mutex_);
  write_behind_ = hook ? mode : WriteBehind::kNone;
  flush_hook_ = std::move(hook);
}

ChunkStore::Flush ChunkStore::FlushOfLocked(Entry* e) {
  e->flushing = true;
  PinLocked(e);
  return Flush{e, e->id.scope, e->id.key, e->slot.data, e->bytes, e->num_tokens};
}

void ChunkStore::RunFlushes(std::vector<Flush> flushes) {
  if (!flushes.empty()) flush_hook_(std::move(flushes));
}

void ChunkStore::EndFlush(Entry* entry, bool written) {
  MutexLock lock(mutex_);
  entry->flushing = false;
  // Not written (the tier is full or failing): it may go all the same, or
  // L1 would fill with chunks that can never leave.
  entry->clean = true;
  if (!written) Stats::Add(stats_.write_behind_failed);
  // Written because eviction picked it: it goes first.
  UnpinLocked(entry, /*oldest=*/write_behind_ == WriteBehind::kOnEviction);
}

bool ChunkStore::EvictLocked(Entry* e, bool may_flush) {
  if (write_behind_ == WriteBehind::kOnEviction && !e->clean) {
    if (may_flush) pending_flushes_.push_back(FlushOfLocked(e));
    return false;
  }
  Stats::Add(stats_.evicted_chunks);
  Stats::Add(stats_.evicted_bytes, e->bytes);
  EraseLocked(e);
  return true;
}

void ChunkStore::EraseLocked(Entry* entry) {
  if (entry->in_lru) lru_.erase(entry->lru);
  pool_.Free(entry->slot);
  index_.erase(entry->id);  // destroys *entry
}

void ChunkStore::TouchLocked(Entry* entry) {
  if (entry->in_lru) lru_.splice(lru_.end(), lru_, entry->lru);
}

void ChunkStore::PinLocked(Entry* entry) {
  if (!entry->in_lru) return;
  lru_.erase(entry->lru);
  entry->in_lru = false;
}

void ChunkStore::UnpinLocked(Entry* entry, bool oldest) {
  if (entry->in_lru || !Evictable(*entry)) return;
  entry->lru = lru_.insert(oldest ? lru_.begin() : lru_.end(), entry);  // just used: most recent
  entry->in_lru = true;
}

std::optional<L1Pool::Slot> ChunkStore::AllocateLocked(uint64_t chunk_bytes) {
  if (auto slot = pool_.Allocate(chunk_bytes)) return slot;
  // Evict in LRU order whatever the size: a chunk of this size frees its slot
  // at once, one of another size frees its slab once that slab empties.
  // Passing over older chunks of other sizes to evict one of this size would
  // confine a registration to the slabs it already holds and evict its
  // newest chunks while stale ones of another model stay. Only evictable
  // chunks are in the list; chunks still to be written below L1 are sent
  // there (at most kFlushAhead per call) and passed over.
  constexpr size_t kFlushAhead = 8;
  const size_t flush_limit = pending_flushes_.size() + kFlushAhead;
  for (auto it = lru_.begin(); it != lru_.end();) {
    Entry* e = *it++;
    if (!EvictLocked(e, pending_flushes_.size() < flush_limit)) continue;
    if (auto slot = pool_.Allocate(chunk_bytes)) return slot;
  }
  return std::nullopt;
}

ChunkStore::StoreTicket ChunkStore::BeginStore(ScopeId scope, const ChunkKey& key,
                                               uint64_t chunk_bytes) {
  std::vector<Flush> flushes;
  StoreTicket ticket;
  {
    MutexLock lock(mutex_);
    ticket = BeginStoreLocked(scope, key, chunk_bytes);
    flushes.swap(pending_flushes_);
  }
  RunFlushes(std::move(flushes));
  return ticket;
}

ChunkStore::StoreTicket ChunkStore::BeginStoreLocked(ScopeId scope, const ChunkKey& key,
                                                     uint64_t chunk_bytes) {
  ScopedKey id{scope, key};
  auto found = index_.find(id);
  if (found != index_.end()) {
    if (!found->second->writing) TouchLocked(found->second.get());
    return {Reservation::kAlreadyPresent, nullptr, nullptr};
  }
  std::optional<L1Pool::Slot> slot = AllocateLocked(chunk_bytes);
  if (!slot) return {Reservation::kNoRoom, nullptr, nullptr};
  auto entry = std::make_unique<Entry>();
  entry->id = id;
  entry->slot = *slot;
  entry->bytes = chunk_bytes;
  Entry* raw = entry.get();
  index_.emplace(id, std::move(entry));
  return {Reservation::kReserved, raw, slot->data, slot->slab};
}

void ChunkStore::CommitStore(Entry* entry, uint32_t num_tokens, bool clean) {
  std::vector<Flush> flushes;
  {
    MutexLock lock(mutex_);
    entry->num_tokens = num_tokens;
    entry->writing = false;
    entry->clean = clean || write_behind_ == WriteBehind::kNone;
    if (!entry->clean && write_behind_ == WriteBehind::kWriteThrough) {
      flushes.push_back(FlushOfLocked(entry));
    } else {
      UnpinLocked(entry);
    }
  }
  RunFlushes(std::move(flushes));
}

void ChunkStore::AbortStore(Entry* entry) {
  MutexLock lock(mutex_);
  EraseLocked(entry);
}

std::optional<ChunkStore::ReadTicket> ChunkStore::BeginRead(ScopeId scope, const ChunkKey& key) {
  MutexLock lock(mutex_);
  auto found = index_.find(ScopedKey{scope, key});
  if (found == index_.end() || found->second->writing) return std::nullopt;
  Entry* e = found->second.get();
  ++e->readers;
  PinLocked(e);
  return ReadTicket{e, e->slot.data, e->num_tokens, e->slot.slab};
}

void ChunkStore::EndRead(Entry* entry) {
  MutexLock lock(mutex_);
  --entry->readers;
  UnpinLocked(entry);
}

bool ChunkStore::Ready(ScopeId scope, const ChunkKey& key) const {
  MutexLock lock(mutex_);
  auto found = index_.find(ScopedKey{scope, key});
  return found != index_.end() && !found->second->writing;
}

ChunkStore::LookupResult ChunkStore::Lookup(ScopeId scope, const std::vector<ChunkKey>& keys,
                                            uint32_t chunk_tokens,
                                            std::chrono::milliseconds lease_time,
                                            const std::string& owner) {
  MutexLock lock(mutex_);
  LookupResult result;
  uint64_t& held = leases_of_[owner];
  if (limits_.per_owner != 0 && held >= limits_.per_owner) {
    if (held == 0) leases_of_.erase(owner);
    result.refused =
        Status::Exhausted("this client holds " + std::to_string(held) + " leases; the limit is " +
                          std::to_string(limits_.per_owner) +
                          " (--max-leases-per-client): release or let some expire");
    return result;
  }
  if (limits_.total != 0 && leases_.size() >= limits_.total) {
    if (held == 0) leases_of_.erase(owner);
    result.refused =
        Status::Exhausted(std::to_string(leases_.size()) + " leases are held; the limit is " +
                          std::to_string(limits_.total) + " (--max-leases)");
    return result;
  }
  Lease lease;
  uint64_t new_bytes = 0;
  for (const ChunkKey& key : keys) {
    auto found = index_.find(ScopedKey{scope, key});
    if (found == index_.end() || found->second->writing) {
      result.ended_at_miss = true;
      break;
    }
    Entry* e = found->second.get();
    // A chunk nobody leases yet adds to the leased bytes: stop the prefix
    // where the budget ends (the engine recomputes the rest).
    if (e->leases == 0 && limits_.leased_bytes != 0 &&
        leased_bytes_ + new_bytes + e->bytes > limits_.leased_bytes) {
      Stats::Add(stats_.leases_truncated);
      result.lease_truncated = true;
      break;
    }
    if (e->leases == 0) new_bytes += e->bytes;
    ++e->leases;
    PinLocked(e);
    lease.entries.push_back(e);
    ++result.hit_chunks;
    result.hit_tokens += e->num_tokens;
    if (e->num_tokens < chunk_tokens) break;  // a partial chunk ends any prefix
  }
  if (result.hit_chunks > 0) {
    leased_bytes_ += new_bytes;
    lease.expires = Clock::now() + lease_time;
    lease.owner = owner;
    result.lease_id = NewLeaseIdLocked();
    by_expiry_.emplace(lease.expires, result.lease_id);
    leases_.emplace(result.lease_id, std::move(lease));
    ++held;
    Stats::Add(stats_.leases_granted);
  } else if (held == 0) {
    leases_of_.erase(owner);
  }
  return result;
}

uint64_t ChunkStore::NewLeaseIdLocked() {
  uint64_t id = 0;
  do {
    id = random_ids_();
  } while (id == 0 || leases_.count(id) != 0);
  return id;
}

uint64_t ChunkStore::AttachLower(uint64_t lease_id, const std::string& owner,
                                 std::chrono::milliseconds lease_time, uint32_t chunks,
                                 std::function<void()> on_end) {
  {
    MutexLock lock(mutex_);
    if (lease_id == 0) {
      Lease lease;
      lease.expires = Clock::now() + lease_time;
      lease.owner = owner;
      lease.lower_chunks = chunks;
      lease.on_end.push_back(std::move(on_end));
      lease_id = NewLeaseIdLocked();
      by_expiry_.emplace(lease.expires, lease_id);
      leases_.emplace(lease_id, std::move(lease));
      ++leases_of_[owner];
      Stats::Add(stats_.leases_granted);
      return lease_id;
    }
    auto found = leases_.find(lease_id);
    if (found != leases_.end() && found->second.owner == owner) {
      found->second.lower_chunks += chunks;
      found->second.on_end.push_back(std::move(on_end));
      return lease_id;
    }
  }
  on_end();  // the lease ended meanwhile
  return 0;
}

void ChunkStore::EndLeaseLocked(Lease& lease, std::vector<std::function<void()>>* after) {
  for (auto& end : lease.on_end) after->push_back(std::move(end));
  for (Entry* e : lease.entries) {
    if (--e->leases == 0) leased_bytes_ -= e->bytes;
    UnpinLocked(e);
  }
  auto held = leases_of_.find(lease.owner);
  if (held != leases_of_.end() && --held->second == 0) leases_of_.erase(held);
}

std::optional<uint32_t> ChunkStore::Release(uint64_t lease_id, const std::string& owner) {
  std::vector<std::function<void()>> after;
  uint32_t chunks = 0;
  {
    MutexLock lock(mutex_);
    auto found = leases_.find(lease_id);
    if (found == leases_.end() || found->second.owner != owner) return std::nullopt;
    chunks = uint32_t(found->second.entries.size()) + found->second.lower_chunks;
    EndLeaseLocked(found->second, &after);
    by_expiry_.erase({found->second.expires, lease_id});
    leases_.erase(found);
    Stats::Add(stats_.leases_released);
  }
  for (auto& run : after) run();
  return chunks;
}

void ChunkStore::ExpireLeases(Clock::time_point now) {
  // Earliest first: the frontend's tick does work only for leases that end.
  std::vector<std::function<void()>> after;
  {
    MutexLock lock(mutex_);
    while (!by_expiry_.empty() && by_expiry_.begin()->first <= now) {
      auto found = leases_.find(by_expiry_.begin()->second);
      by_expiry_.erase(by_expiry_.begin());
      if (found == leases_.end()) continue;
      EndLeaseLocked(found->second, &after);
      leases_.erase(found);
      Stats::Add(stats_.leases_expired);
    }
  }
  for (auto& run : after) run();
}

uint64_t ChunkStore::Clear(const std::function<bool(ScopeId)>& matches) {
  MutexLock lock(mutex_);
  uint64_t cleared = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    Entry* e = *it++;
    if (matches(e->id.scope)) {  // the list holds evictable chunks only
      EraseLocked(e);
      ++cleared;
    }
  }
  Stats::Add(stats_.cleared_chunks, cleared);
  return cleared;
}

ChunkStore::Usage ChunkStore::usage() const {
  MutexLock lock(mutex_);
  return Usage{index_.size(), leases_.size(), pool_.used_bytes(), pool_.capacity_bytes(),
               leased_bytes_};
}

}  // namespace kvstash::server
