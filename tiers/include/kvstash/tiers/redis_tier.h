// L3: chunks in Redis or Valkey, shared by every node that names the same
// servers (--l3-redis). A chunk stored by one kvstashd is found and read
// byte-exact by another.
//
// Keys: "<prefix>:{<scope hex><key hex>}:<part>". The hash tag is the whole
// chunk id, so a chunk's parts live on one Redis Cluster slot, and scopes
// (models, layouts, ranks, tenants) never share a key. Values: part 0 is the
// ChunkHeader alone (its part_bytes says how the payload was split); parts
// 1.. hold the payload, each at most `part_bytes` (Redis refuses values over
// proto-max-bulk-len, 512 MB by default). Part 0 is written last, so a
// reader sees a chunk only once all its parts are there; every read checks
// the header and the payload checksum, so parts evicted or overwritten
// underneath read as missing, never as wrong bytes.
//
// Servers: one or more HOST:PORT. When the first that answers runs in
// cluster mode, they are seeds: the slot map comes from CLUSTER SLOTS and
// follows MOVED / ASK redirections. Otherwise each listed server is a
// shard, chosen by the key's slot modulo their number.
//
// Failure: hiredis connections with connect and command timeouts, one set
// per I/O thread, and a circuit breaker per server: after
// `breaker_failures` failures in a row calls to it fail at once
// (Unavailable) for `breaker_open_ms`, then one call tries again. Replies
// are untrusted: bounded before they are read, checked before they are
// used. Destroying the tier gives queued work one command timeout, then
// every wait on a server ends at once.
//
// Thread-safe. Calls return at once; the work runs on the tier's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/tiers/tier.h"

namespace kvstash::tiers {

struct RedisTierOptions {
  std::vector<std::string> servers;  // "HOST:PORT"
  std::string user;                  // ACL user; empty: AUTH with the password alone
  std::string password;              // empty: no AUTH
  std::string key_prefix = "kvstash";
  uint32_t connect_timeout_ms = 500;
  uint32_t command_timeout_ms = 2000;
  uint32_t io_threads = 4;
  uint64_t part_bytes = 16ull << 20;  // largest value written
  uint32_t ttl_s = 0;                 // expiry of written chunks; 0 = none
  uint32_t breaker_failures = 3;
  uint32_t breaker_open_ms = 1000;
  uint64_t max_pending_put_bytes = 1ull << 30;  // puts beyond this are refused, not queued
};

// "h1:6379,h2:6380" -> {"h1:6379", "h2:6380"}; errors name the bad entry.
Result<std::vector<std::string>> ParseRedisServers(const std::string& text);

class RedisTier final : public Tier {
 public:
  // Checks the options; does not wait for the servers (a dead Redis must
  // not stop the daemon from starting).
  static Result<std::unique_ptr<RedisTier>> Open(const RedisTierOptions& options);
  ~RedisTier() override;

  const std::string& name() const override;
  void Put(std::vector<PutRequest> batch, PutDone done) override;
  void Get(std::vector<GetRequest> batch, GetDone done) override;
  void Contains(std::vector<ChunkId> ids, ContainsDone done) override;
  void Remove(std::vector<ChunkId> ids, RemoveDone done) override;
  TierUsage Usage() const override;
  const TierStats& stats() const override;

  // The Redis key of a chunk's part (tests corrupt values on purpose).
  std::string KeyOf(const ChunkId& id, uint32_t part) const;

  class Impl;

 private:
  explicit RedisTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::tiers
