// The leases part of the service: Lookup and the Release of what it leased.
// A lease belongs to the connection that took it.
//
// With tiers below L1, a lookup's prefix goes on past L1 in L2 (answered at
// once from its index; leased L2 chunks are pinned there until the lease
// ends) and then in L3 (a round trip to Redis: the reply comes later, off
// the frontend). A prefetch starts promoting the prefix's L2/L3 chunks into
// L1; a later lookup says how many are still on their way.
//
// Frontend thread; the chunk store and the tier chain are thread-safe.
#pragma once

#include "chunk_store.h"
#include "registrations.h"
#include "requests.h"
#include "tier_chain.h"

namespace kvstash::server {

class Leases {
 public:
  using Reply = HandlerReply;

  Leases(const config::ServerConfig& config, Stats& stats, DeferredReplies& deferred,
         ChunkStore& store, TierChain& tiers, const Registrations& registrations)
      : config_(config),
        stats_(stats),
        deferred_(deferred),
        store_(&store),
        tiers_(tiers),
        registrations_(registrations) {}

  Reply Lookup(const Request& r, const LookupRequest& m);
  Reply Release(const Request& r, const ReleaseRequest& m);

 private:
  // The prefix found so far, in every tier.
  struct Found {
    std::vector<uint8_t> tiers;  // TierLevel per hit
    uint64_t hit_tokens = 0;
    uint64_t lease_id = 0;
    bool lease_truncated = false;  // L1's prefix stopped at the leased-bytes budget
  };
  // Leases the lower-tier hits `more` (pinned L2 chunks stay pinned until the
  // lease ends), adds them to `found`.
  void AddLower(Found& found, TierChain::Continuation more, const PeerId& owner, uint32_t lease_ms);
  // Counts, prefetches and builds the reply.
  LookupReply Finish(Registration& reg, const LookupRequest& m, const Found& found,
                     uint32_t lease_ms);

  const config::ServerConfig& config_;
  Stats& stats_;
  DeferredReplies& deferred_;
  ChunkStore* store_;
  TierChain& tiers_;
  const Registrations& registrations_;
};

}  // namespace kvstash::server
