// Lookup and Release: leases on the stored prefix, owned by the connection
// that took them; the prefix continues in L2 and L3 (leases.h).
#include <string>

#include "leases.h"

namespace kvstash::server {

Leases::Reply Leases::Lookup(const Request& r, const LookupRequest& m) {
  Result<std::shared_ptr<Registration>> found =
      registrations_.FindRegistration(m.registration_id, r.peer);
  if (!found.ok()) return found.status();
  std::shared_ptr<Registration> reg = *found;
  // Clamped: a lease never outlives --max-lease-ms.
  const uint32_t lease_ms =
      std::min(m.lease_ms ? m.lease_ms : config_.lease_ms, config_.max_lease_ms);
  ChunkStore::LookupResult hit = store_->Lookup(reg->scope, m.keys, reg->layout.chunk_tokens(),
                                                std::chrono::milliseconds(lease_ms), r.peer.id);
  if (!hit.refused.ok()) return hit.refused;
  Found prefix;
  prefix.tiers.assign(hit.hit_chunks, uint8_t(TierLevel::kL1));
  prefix.hit_tokens = hit.hit_tokens;
  prefix.lease_id = hit.lease_id;
  prefix.lease_truncated = hit.lease_truncated;
  if (!tiers_.enabled() || !hit.ended_at_miss) {
    return std::optional<ReplyBody>(Finish(*reg, m, prefix, lease_ms));
  }
  const uint32_t chunk_tokens = reg->layout.chunk_tokens();
  std::vector<ChunkKey> rest(m.keys.begin() + hit.hit_chunks, m.keys.end());
  TierChain::Continuation l2 = tiers_.FindInL2(reg->namespace_id, rest, chunk_tokens);
  const bool go_on = l2.ended_at_miss;
  const size_t l2_hits = l2.levels.size();
  AddLower(prefix, std::move(l2), r.peer.id, lease_ms);
  // L3 is a network round trip: the reply comes later, never holding the
  // frontend. A client at its in-flight limit gets the L1 and L2 prefix.
  if (!go_on || !tiers_.has_l3() || !deferred_.CheckInFlight(r.peer.id).ok()) {
    return std::optional<ReplyBody>(Finish(*reg, m, prefix, lease_ms));
  }
  rest.erase(rest.begin(), rest.begin() + long(l2_hits));
  deferred_.Begin(r.peer.id);
  auto shared = std::make_shared<Found>(std::move(prefix));
  tiers_.FindInL3(reg->namespace_id, std::move(rest), chunk_tokens,
                  [this, r, m, reg, shared, lease_ms](TierChain::Continuation l3) {
                    AddLower(*shared, std::move(l3), r.peer.id, lease_ms);
                    deferred_.Finish(r, Finish(*reg, m, *shared, lease_ms));
                  });
  return std::optional<ReplyBody>();
}

void Leases::AddLower(Found& found, TierChain::Continuation more, const PeerId& owner,
                      uint32_t lease_ms) {
  if (more.levels.empty()) return;
  for (TierLevel level : more.levels) found.tiers.push_back(uint8_t(level));
  found.hit_tokens += more.hit_tokens;
  TierChain* tiers = &tiers_;
  std::vector<tiers::ChunkId> pinned = std::move(more.pinned);
  const uint64_t lease = store_->AttachLower(
      found.lease_id, owner, std::chrono::milliseconds(lease_ms), uint32_t(more.levels.size()),
      [tiers, pinned] { tiers->UnpinL2(pinned); });
  // 0: the L1 lease ended meanwhile (its pins went with it); a new one
  // holds the lower chunks alone.
  if (lease == 0) {
    found.lease_id = 0;
  } else {
    found.lease_id = lease;
  }
}

LookupReply Leases::Finish(Registration& reg, const LookupRequest& m, const Found& found,
                           uint32_t lease_ms) {
  const uint32_t hits = uint32_t(found.tiers.size());
  uint32_t l2 = 0, l3 = 0;
  for (uint8_t t : found.tiers) {
    l2 += t == uint8_t(TierLevel::kL2);
    l3 += t == uint8_t(TierLevel::kL3);
  }
  stats_.LookupAnswered(reg.stats, m.keys.size(), hits, found.hit_tokens);
  Stats::Add(stats_.lookup_hit_chunks_l2, l2);
  Stats::Add(stats_.lookup_hit_chunks_l3, l3);
  LookupReply reply{
      hits, found.hit_tokens, found.lease_id, found.lease_id ? lease_ms : 0, found.tiers, 0};
  reply.lease_truncated = found.lease_truncated;
  if (l2 + l3 == 0) return reply;
  std::vector<ChunkKey> lower;
  for (size_t i = 0; i < found.tiers.size(); ++i) {
    if (found.tiers[i] != uint8_t(TierLevel::kL1)) lower.push_back(m.keys[i]);
  }
  if (m.prefetch) {
    Stats::Add(stats_.prefetch_chunks, lower.size());
    TierChain::Scope scope{reg.scope, reg.namespace_id, reg.layout.fingerprint(),
                           reg.layout.chunk_bytes(), reg.layout.chunk_tokens()};
    tiers_.Promote(scope, lower, [] {});
  }
  reply.prefetch_pending = tiers_.Promoting(reg.namespace_id, lower);
  return reply;
}

Leases::Reply Leases::Release(const Request& r, const ReleaseRequest& m) {
  std::optional<uint32_t> released = store_->Release(m.lease_id, r.peer.id);
  if (!released) {
    return Status::NotFound("unknown lease " + std::to_string(m.lease_id) +
                            " (released already, expired, or never granted)");
  }
  return std::optional<ReplyBody>(ReleaseReply{*released});
}

}  // namespace kvstash::server
