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
  uint32_t readers = 0;
  uint32_t leases = 0;
  std::list<Entry*>::iterator lru;  // valid once Ready
};

size_t ChunkStore::ScopedKeyHash::operator()(const ScopedKey& k) const {
  return hash(k.scope, k.key);
}

ChunkStore::ChunkStore(L1Pool& pool, Stats& stats)
    : pool_(pool), stats_(stats),
      index_(0, ScopedKeyHash{ChunkKeyHash((uint64_t(std::random_device{}()) << 32) | std::random_device{}())}) {}

ChunkStore::~ChunkStore() = default;

bool ChunkStore::Evictable(const Entry& e) const {
  return !e.writing && e.readers == 0 && e.leases == 0;
}

void ChunkStore::EraseLocked(Entry* entry) {
  if (!entry->writing) lru_.erase(entry->lru);
  pool_.Free(entry->slot);
  index_.erase(entry->id);  // destroys *entry
}

void ChunkStore::TouchLocked(Entry* entry) {
  lru_.splice(lru_.end(), lru_, entry->lru);
}

std::optional<L1Pool::Slot> ChunkStore::AllocateLocked(uint64_t chunk_bytes) {
  if (auto slot = pool_.Allocate(chunk_bytes)) return slot;
  // Evict the least recently used chunk of the same size first: its slot is
  // exactly what is needed.
  for (auto it = lru_.begin(); it != lru_.end(); ++it) {
    Entry* e = *it;
    if (e->bytes == chunk_bytes && Evictable(*e)) {
      Stats::Add(stats_.evicted_chunks);
      Stats::Add(stats_.evicted_bytes, e->bytes);
      EraseLocked(e);
      return pool_.Allocate(chunk_bytes);
    }
  }
  // Otherwise free whole slabs of other sizes, oldest chunks first, until one
  // slab empties and can serve this size.
  for (auto it = lru_.begin(); it != lru_.end();) {
    Entry* e = *it++;
    if (!Evictable(*e)) continue;
    Stats::Add(stats_.evicted_chunks);
    Stats::Add(stats_.evicted_bytes, e->bytes);
    EraseLocked(e);
    if (auto slot = pool_.Allocate(chunk_bytes)) return slot;
  }
  return std::nullopt;
}

ChunkStore::StoreTicket ChunkStore::BeginStore(ScopeId scope, const ChunkKey& key,
                                               uint64_t chunk_bytes) {
  std::lock_guard<std::mutex> lock(mutex_);
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
  return {Reservation::kReserved, raw, slot->data};
}

void ChunkStore::CommitStore(Entry* entry, uint32_t num_tokens) {
  std::lock_guard<std::mutex> lock(mutex_);
  entry->num_tokens = num_tokens;
  entry->writing = false;
  entry->lru = lru_.insert(lru_.end(), entry);
}

void ChunkStore::AbortStore(Entry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  EraseLocked(entry);
}

std::optional<ChunkStore::ReadTicket> ChunkStore::BeginRead(ScopeId scope, const ChunkKey& key) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = index_.find(ScopedKey{scope, key});
  if (found == index_.end() || found->second->writing) return std::nullopt;
  Entry* e = found->second.get();
  ++e->readers;
  TouchLocked(e);
  return ReadTicket{e, e->slot.data, e->num_tokens};
}

void ChunkStore::EndRead(Entry* entry) {
  std::lock_guard<std::mutex> lock(mutex_);
  --entry->readers;
}

ChunkStore::LookupResult ChunkStore::Lookup(ScopeId scope, const std::vector<ChunkKey>& keys,
                                            uint32_t chunk_tokens,
                                            std::chrono::milliseconds lease_time) {
  std::lock_guard<std::mutex> lock(mutex_);
  LookupResult result;
  Lease lease;
  for (const ChunkKey& key : keys) {
    auto found = index_.find(ScopedKey{scope, key});
    if (found == index_.end() || found->second->writing) break;
    Entry* e = found->second.get();
    ++e->leases;
    TouchLocked(e);
    lease.entries.push_back(e);
    ++result.hit_chunks;
    result.hit_tokens += e->num_tokens;
    if (e->num_tokens < chunk_tokens) break;  // a partial chunk ends any prefix
  }
  if (result.hit_chunks > 0) {
    lease.expires = Clock::now() + lease_time;
    result.lease_id = next_lease_id_++;
    leases_.emplace(result.lease_id, std::move(lease));
    Stats::Add(stats_.leases_granted);
  }
  return result;
}

void ChunkStore::EndLeaseLocked(Lease& lease) {
  for (Entry* e : lease.entries) --e->leases;
}

std::optional<uint32_t> ChunkStore::Release(uint64_t lease_id) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto found = leases_.find(lease_id);
  if (found == leases_.end()) return std::nullopt;
  const uint32_t chunks = uint32_t(found->second.entries.size());
  EndLeaseLocked(found->second);
  leases_.erase(found);
  Stats::Add(stats_.leases_released);
  return chunks;
}

void ChunkStore::ExpireLeases(Clock::time_point now) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto it = leases_.begin(); it != leases_.end();) {
    if (it->second.expires <= now) {
      EndLeaseLocked(it->second);
      it = leases_.erase(it);
      Stats::Add(stats_.leases_expired);
    } else {
      ++it;
    }
  }
}

uint64_t ChunkStore::Clear(const std::function<bool(ScopeId)>& matches) {
  std::lock_guard<std::mutex> lock(mutex_);
  uint64_t cleared = 0;
  for (auto it = lru_.begin(); it != lru_.end();) {
    Entry* e = *it++;
    if (Evictable(*e) && matches(e->id.scope)) {
      EraseLocked(e);
      ++cleared;
    }
  }
  Stats::Add(stats_.cleared_chunks, cleared);
  return cleared;
}

ChunkStore::Usage ChunkStore::usage() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return Usage{index_.size(), leases_.size(), pool_.used_bytes(), pool_.capacity_bytes()};
}

}  // namespace kvstash::server
