// L2 and L3 under the chunk store: write-behind, the lookup continuation,
// lease pins and promotion (see tier_chain.h).
#include "tier_chain.h"
#include "kvstash/runtime/thread_annotations.h"

#include <nlohmann/json.hpp>

#include "daemon_logger.h"

namespace kvstash::server {

namespace {

tiers::ChunkId IdOf(const ChunkKey& namespace_id, const ChunkKey& key) {
  tiers::ChunkId id;
  id.scope = namespace_id;
  id.key = key;
  return id;
}

}  // namespace

TierChain::TierChain(ChunkStore& store, Stats& stats, ChunkStore::WriteBehind mode)
    : store_(store), stats_(stats), mode_(mode) {}

TierChain::~TierChain() { Shutdown(); }

Result<std::unique_ptr<TierChain>> TierChain::Create(const config::ServerConfig& config,
                                                     ChunkStore& store, Stats& stats) {
  const bool any = !config.l2_path.empty() || !config.l3_redis.empty();
  const ChunkStore::WriteBehind mode = !any ? ChunkStore::WriteBehind::kNone
                                       : config.tier_write == config::TierWrite::kOnEviction
                                           ? ChunkStore::WriteBehind::kOnEviction
                                           : ChunkStore::WriteBehind::kWriteThrough;
  std::unique_ptr<TierChain> chain(new TierChain(store, stats, mode));
  if (!config.l2_path.empty()) {
    tiers::DiskTierOptions options;
    options.path = config.l2_path;
    options.capacity_bytes = uint64_t(config.l2_gb * double(uint64_t{1} << 30));
    options.io_threads = config.l2_io_threads;
    Result<std::unique_ptr<tiers::DiskTier>> l2 = tiers::DiskTier::Open(options);
    if (!l2.ok()) {
      return Status(l2.status().code(),
                    "--l2-path " + config.l2_path + ": " + l2.status().message());
    }
    chain->l2_ = std::move(*l2);
    const tiers::DiskRebuildReport& report = chain->l2_->rebuild_report();
    Logger()->info(
        "L2 at {}: {} chunks ({} bytes) indexed in {:.3f} s; {} invalid, {} over "
        "capacity and {} unfinished files deleted",
        config.l2_path, report.chunks, report.bytes, report.seconds, report.dropped_files,
        report.evicted_files, report.temp_files);
    if (!chain->l2_->io_uring_refused_reason().empty()) {
      Logger()->warn("L2 runs on {} --l2-io-threads: io_uring was refused ({})",
                     config.l2_io_threads, chain->l2_->io_uring_refused_reason());
    } else {
      Logger()->info("L2 I/O: {}", chain->l2_->io_engine());
    }
  }
  if (!config.l3_redis.empty()) {
    Result<std::vector<std::string>> servers = tiers::ParseRedisServers(config.l3_redis);
    if (!servers.ok()) return servers.status();
    tiers::RedisTierOptions options;
    options.servers = *servers;
    options.user = config.l3_user;
    options.password = config.l3_password;
    options.connect_timeout_ms = config.l3_connect_timeout_ms;
    options.command_timeout_ms = config.l3_timeout_ms;
    options.io_threads = config.l3_io_threads;
    options.part_bytes = uint64_t(config.l3_part_mb) << 20;
    options.ttl_s = config.l3_ttl_s;
    options.breaker_failures = config.l3_breaker_failures;
    options.breaker_open_ms = config.l3_breaker_open_ms;
    Result<std::unique_ptr<tiers::RedisTier>> l3 = tiers::RedisTier::Open(options);
    if (!l3.ok()) return l3.status();
    chain->l3_ = std::move(*l3);
    Logger()->info("L3 on Redis {}", config.l3_redis);
  }
  if (chain->enabled()) {
    TierChain* raw = chain.get();
    store.SetWriteBehind(mode,
                         [raw](std::vector<ChunkStore::Flush> f) { raw->Flush(std::move(f)); });
  }
  return chain;
}

void TierChain::Shutdown() {
  {
    std::unique_lock<std::shared_mutex> lock(life_);
    if (stopping_) return;
    stopping_ = true;
  }
  // Their queues drain first; callbacks that call back in find the chain
  // stopped and fail at once.
  l3_.reset();
  l2_.reset();
}

void TierChain::AddScope(ScopeId scope, const ChunkKey& namespace_id, const Fingerprint& layout) {
  MutexLock lock(scopes_mutex_);
  scopes_.emplace(scope, Scope{scope, namespace_id, layout, 0});
}

void TierChain::Flush(std::vector<ChunkStore::Flush> flushes) {
  std::vector<tiers::PutRequest> puts;
  std::vector<ChunkStore::Entry*> entries;
  {
    MutexLock lock(scopes_mutex_);
    for (const ChunkStore::Flush& f : flushes) {
      auto scope = scopes_.find(f.scope);
      if (scope == scopes_.end()) {
        store_.EndFlush(f.entry, false);
        continue;
      }
      tiers::PutRequest put;
      put.id = IdOf(scope->second.namespace_id, f.key);
      put.layout_fingerprint = scope->second.layout;
      put.num_tokens = f.num_tokens;
      put.payload = f.data;
      put.payload_bytes = f.bytes;
      puts.push_back(put);
      entries.push_back(f.entry);
    }
  }
  if (puts.empty()) return;
  std::shared_lock<std::shared_mutex> lock(life_);
  if (stopping_) {
    for (ChunkStore::Entry* e : entries) store_.EndFlush(e, false);
    return;
  }
  Stats::Add(stats_.write_behind_chunks, puts.size());
  // Each entry stays pinned until every tier has its bytes.
  struct Pending {
    std::vector<ChunkStore::Entry*> entries;
    Mutex mutex;
    std::vector<uint8_t> written KVSTASH_GUARDED_BY(mutex);
    std::atomic<int> tiers_left{0};
  };
  auto pending = std::make_shared<Pending>();
  pending->entries = std::move(entries);
  {
    MutexLock lock(pending->mutex);  // not yet shared; the analysis wants it
    pending->written.assign(pending->entries.size(), 0);
  }
  pending->tiers_left = (l2_ ? 1 : 0) + (l3_ ? 1 : 0);
  {
    MutexLock writes(writes_mutex_);
    ++writes_in_flight_;
  }
  auto done = [this, pending](std::vector<tiers::PutResult> results) {
    // Results of different tiers come on different threads: each tier
    // marks its own successes, the last one ends the flushes.
    {
      MutexLock lock(pending->mutex);
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].outcome != tiers::PutOutcome::kFailed) pending->written[i] = 1;
      }
    }
    if (pending->tiers_left.fetch_sub(1) != 1) return;
    std::vector<uint8_t> written;
    {
      MutexLock lock(pending->mutex);
      written = pending->written;
    }
    for (size_t i = 0; i < pending->entries.size(); ++i) {
      store_.EndFlush(pending->entries[i], written[i] != 0);
    }
    // Slots may have come free: promotions that found none try again.
    std::vector<std::function<void()>> waiters;
    {
      MutexLock writes(writes_mutex_);
      --writes_in_flight_;
      waiters.swap(write_waiters_);
    }
    for (auto& retry : waiters) retry();
  };
  if (l2_) l2_->Put(puts, done);
  if (l3_) l3_->Put(std::move(puts), done);
}

TierChain::Continuation TierChain::FindInL2(const ChunkKey& namespace_id,
                                            const std::vector<ChunkKey>& keys,
                                            uint32_t chunk_tokens) {
  Continuation out;
  out.ended_at_miss = !keys.empty();
  std::shared_lock<std::shared_mutex> lock(life_);
  if (stopping_ || !l2_ || keys.empty()) return out;
  std::vector<tiers::ChunkId> ids;
  for (const ChunkKey& key : keys) ids.push_back(IdOf(namespace_id, key));
  std::vector<tiers::Presence> present;
  l2_->Contains(ids, [&](std::vector<tiers::Presence> p) { present = std::move(p); });  // at once
  size_t n = 0;
  bool partial = false;
  while (n < present.size() && present[n].present &&
         tiers::TokensFit(present[n].header, chunk_tokens) && !partial) {
    partial = present[n].header.num_tokens < chunk_tokens;
    ++n;
  }
  ids.resize(n);
  const std::vector<bool> pinned = l2_->Pin(ids);
  size_t held = 0;
  while (held < pinned.size() && pinned[held]) ++held;
  // Removed between the two calls: the prefix ends before it.
  std::vector<tiers::ChunkId> unpin;
  for (size_t i = held; i < pinned.size(); ++i) {
    if (pinned[i]) unpin.push_back(ids[i]);
  }
  if (!unpin.empty()) l2_->Unpin(unpin);
  ids.resize(held);
  for (size_t i = 0; i < held; ++i) {
    out.levels.push_back(TierLevel::kL2);
    out.hit_tokens += present[i].header.num_tokens;
  }
  out.ended_at_miss = held == n && !partial && n < keys.size();
  out.pinned = std::move(ids);
  return out;
}

void TierChain::FindInL3(const ChunkKey& namespace_id, std::vector<ChunkKey> keys,
                         uint32_t chunk_tokens, std::function<void(Continuation)> done) {
  std::vector<tiers::ChunkId> ids;
  for (const ChunkKey& key : keys) ids.push_back(IdOf(namespace_id, key));
  {
    std::shared_lock<std::shared_mutex> lock(life_);
    if (!stopping_ && l3_ && !ids.empty()) {
      l3_->Contains(std::move(ids), [chunk_tokens, done](std::vector<tiers::Presence> present) {
        Continuation out;
        for (const tiers::Presence& p : present) {
          if (!p.status.ok() || !p.present || !tiers::TokensFit(p.header, chunk_tokens)) break;
          out.levels.push_back(TierLevel::kL3);
          out.hit_tokens += p.header.num_tokens;
          if (p.header.num_tokens < chunk_tokens) break;
        }
        done(std::move(out));
      });
      return;
    }
  }
  done(Continuation{});
}

void TierChain::UnpinL2(const std::vector<tiers::ChunkId>& ids) {
  std::shared_lock<std::shared_mutex> lock(life_);
  if (!stopping_ && l2_ && !ids.empty()) l2_->Unpin(ids);
}

// Read pins on the chunks a promotion landed, ended once its `done` ran.
struct TierChain::Held {
  Mutex mutex;
  std::vector<ChunkStore::Entry*> entries KVSTASH_GUARDED_BY(mutex);
};

struct TierChain::Promotion {
  std::shared_ptr<Held> held;
  Scope scope;
  std::vector<ChunkKey> keys;
  std::vector<ChunkStore::Entry*> entries;  // reserved L1 slots, per key
  std::vector<uint8_t*> slots;
  std::atomic<size_t> left{0};
  std::function<void()> done;
};

bool TierChain::WhenAWriteEnds(std::function<void()> retry) {
  MutexLock lock(writes_mutex_);
  if (writes_in_flight_ == 0) return false;
  write_waiters_.push_back(std::move(retry));
  return true;
}

void TierChain::Promote(const Scope& scope, std::vector<ChunkKey> keys,
                        std::function<void()> done) {
  auto held = std::make_shared<Held>();
  auto release = [this, held, done = std::move(done)] {
    done();
    MutexLock lock(held->mutex);
    for (ChunkStore::Entry* e : held->entries) store_.EndRead(e);
    held->entries.clear();
  };
  PromoteTry(scope, std::move(keys), std::move(release), /*tries=*/8, held);
}

void TierChain::PromoteTry(const Scope& scope, std::vector<ChunkKey> keys,
                           std::function<void()> done, int tries, std::shared_ptr<Held> held) {
  auto p = std::make_shared<Promotion>();
  p->held = held;
  p->scope = scope;
  std::vector<ChunkKey> no_room;
  for (const ChunkKey& key : keys) {
    ChunkStore::StoreTicket ticket = store_.BeginStore(scope.scope, key, scope.chunk_bytes);
    if (ticket.result == ChunkStore::Reservation::kNoRoom) {
      no_room.push_back(key);
      continue;
    }
    // In L1 already, or on its way: nothing to bring up.
    if (ticket.result != ChunkStore::Reservation::kReserved) continue;
    p->keys.push_back(key);
    p->entries.push_back(ticket.entry);
    p->slots.push_back(ticket.slot);
  }
  // `done` once both the landing and the retry have finished.
  auto parts = std::make_shared<std::atomic<int>>(2);
  auto finish = [parts, done = std::move(done)] {
    if (parts->fetch_sub(1) == 1) done();
  };
  p->done = finish;
  if (p->keys.empty()) {
    finish();
  } else {
    Land(p);
  }
  if (no_room.empty()) return finish();
  const Scope copy = scope;
  auto retry = [this, copy, no_room, finish, tries, held]() mutable {
    PromoteTry(copy, std::move(no_room), finish, tries - 1, held);
  };
  if (tries > 0) {
    // Every slot is pinned while being written below: try again once a
    // write ends, or at once when none is in flight any more.
    if (WhenAWriteEnds(retry)) return;
    if (tries > 1) return retry();
  }
  Stats::Add(stats_.promote_failed, no_room.size());
  finish();
}

void TierChain::Land(const std::shared_ptr<Promotion>& p) {
  const Scope& scope = p->scope;
  {
    MutexLock lock(promoting_mutex_);
    for (const ChunkKey& key : p->keys) promoting_.insert(IdOf(scope.namespace_id, key));
  }
  p->left = p->keys.size();
  std::vector<tiers::GetRequest> gets;
  for (size_t i = 0; i < p->keys.size(); ++i) {
    tiers::GetRequest get;
    get.expect.id = IdOf(scope.namespace_id, p->keys[i]);
    get.expect.layout_fingerprint = scope.layout;
    get.expect.payload_bytes = scope.chunk_bytes;
    get.expect.max_tokens = scope.chunk_tokens;
    get.payload = p->slots[i];
    gets.push_back(get);
  }
  std::shared_lock<std::shared_mutex> lock(life_);
  if (!stopping_ && l2_) {
    l2_->Get(std::move(gets), [this, p](std::vector<tiers::GetResult> results) {
      std::vector<size_t> to_l3;
      for (size_t i = 0; i < results.size(); ++i) {
        if (results[i].status.ok()) {
          FinishPromotion(p, i, true, results[i].num_tokens);
        } else {
          to_l3.push_back(i);
        }
      }
      if (!to_l3.empty()) PromoteFromL3(p, std::move(to_l3));
    });
    return;
  }
  lock.unlock();
  std::vector<size_t> all(p->keys.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  PromoteFromL3(p, std::move(all));
}

void TierChain::PromoteFromL3(const std::shared_ptr<Promotion>& p, std::vector<size_t> items) {
  std::shared_lock<std::shared_mutex> lock(life_);
  if (stopping_ || !l3_) {
    lock.unlock();
    for (size_t i : items) FinishPromotion(p, i, false, 0);
    return;
  }
  std::vector<tiers::GetRequest> gets;
  for (size_t i : items) {
    tiers::GetRequest get;
    get.expect.id = IdOf(p->scope.namespace_id, p->keys[i]);
    get.expect.layout_fingerprint = p->scope.layout;
    get.expect.payload_bytes = p->scope.chunk_bytes;
    get.expect.max_tokens = p->scope.chunk_tokens;
    get.payload = p->slots[i];
    gets.push_back(get);
  }
  l3_->Get(std::move(gets), [this, p, items](std::vector<tiers::GetResult> results) {
    for (size_t k = 0; k < results.size(); ++k) {
      FinishPromotion(p, items[k], results[k].status.ok(), results[k].num_tokens);
    }
  });
}

void TierChain::FinishPromotion(const std::shared_ptr<Promotion>& p, size_t i, bool landed,
                                uint32_t num_tokens) {
  if (landed) {
    store_.CommitStore(p->entries[i], num_tokens, /*clean=*/true);
    Stats::Add(stats_.promoted_chunks);
    if (auto read = store_.BeginRead(p->scope.scope, p->keys[i])) {
      MutexLock lock(p->held->mutex);
      p->held->entries.push_back(read->entry);
    }
  } else {
    store_.AbortStore(p->entries[i]);  // missing or failing its checks: never served
    Stats::Add(stats_.promote_failed);
  }
  {
    MutexLock lock(promoting_mutex_);
    promoting_.erase(IdOf(p->scope.namespace_id, p->keys[i]));
  }
  if (p->left.fetch_sub(1) == 1) p->done();
}

uint32_t TierChain::Promoting(const ChunkKey& namespace_id,
                              const std::vector<ChunkKey>& keys) const {
  MutexLock lock(promoting_mutex_);
  uint32_t n = 0;
  for (const ChunkKey& key : keys) n += promoting_.count(IdOf(namespace_id, key)) ? 1 : 0;
  return n;
}

std::vector<TierSnapshot> TierChain::ReadStats() const {
  std::vector<TierSnapshot> out;
  std::shared_lock<std::shared_mutex> lock(life_);
  if (stopping_) return out;
  auto add = [&](const tiers::Tier& tier, const char* level) {
    TierSnapshot t;
    t.name = tier.name();
    t.level = level;
    const tiers::TierUsage usage = tier.Usage();
    t.capacity_bytes = usage.capacity_bytes;
    t.used_bytes = usage.used_bytes;
    t.chunks = usage.chunks;
    for (const auto& c : tier.stats().ReadCounters())
      t.counters.push_back({c.name, c.help, c.value});
    t.put_latency = tier.stats().put_latency.Read();
    t.get_latency = tier.stats().get_latency.Read();
    out.push_back(std::move(t));
  };
  if (l2_) add(*l2_, "L2");
  if (l3_) add(*l3_, "L3");
  return out;
}

void TierChain::Describe(nlohmann::json& tiers) const {
  const char* write =
      mode_ == ChunkStore::WriteBehind::kOnEviction ? "on-eviction" : "write-through";
  for (const TierSnapshot& t : ReadStats()) {
    nlohmann::json counters = nlohmann::json::object();
    for (const auto& c : t.counters) counters[c.name] = c.value;
    nlohmann::json entry{{"name", t.level},
                         {"kind", t.name == "l2-disk" ? "local disk" : "Redis / Valkey"},
                         {"tier", t.name},
                         {"write", write},
                         {"capacity_bytes", t.capacity_bytes},
                         {"used_bytes", t.used_bytes},
                         {"chunks", t.chunks},
                         {"counters", counters}};
    if (t.name == "l2-disk") {
      std::shared_lock<std::shared_mutex> lock(life_);
      if (l2_) {
        const tiers::DiskRebuildReport& r = l2_->rebuild_report();
        entry["rebuild"] = {{"chunks", r.chunks},
                            {"bytes", r.bytes},
                            {"dropped_files", r.dropped_files},
                            {"evicted_files", r.evicted_files},
                            {"temp_files", r.temp_files},
                            {"seconds", r.seconds}};
      }
    }
    tiers.push_back(entry);
  }
}

}  // namespace kvstash::server
