// Lookup and Release: leases on the stored prefix, owned by the connection
// that took them.
#include <string>

#include "service.h"

namespace kvstash::server {

Service::Reply Service::Lookup(const Request& r, const LookupRequest& m) {
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id, r.peer);
  if (!found.ok()) return found.status();
  Registration& reg = **found;
  // Clamped: a lease never outlives --max-lease-ms.
  const uint32_t lease_ms =
      std::min(m.lease_ms ? m.lease_ms : config_.lease_ms, config_.max_lease_ms);
  ChunkStore::LookupResult hit = store_->Lookup(reg.scope, m.keys, reg.layout.chunk_tokens(),
                                                std::chrono::milliseconds(lease_ms), r.peer.id);
  if (!hit.refused.ok()) return hit.refused;
  stats_.LookupAnswered(reg.stats, m.keys.size(), hit.hit_chunks, hit.hit_tokens);
  return std::optional<ReplyBody>(
      LookupReply{hit.hit_chunks, hit.hit_tokens, hit.lease_id, hit.lease_id ? lease_ms : 0});
}

Service::Reply Service::Release(const Request& r, const ReleaseRequest& m) {
  std::optional<uint32_t> released = store_->Release(m.lease_id, r.peer.id);
  if (!released) {
    return Status::NotFound("unknown lease " + std::to_string(m.lease_id) +
                            " (released already, expired, or never granted)");
  }
  return std::optional<ReplyBody>(ReleaseReply{*released});
}

}  // namespace kvstash::server
