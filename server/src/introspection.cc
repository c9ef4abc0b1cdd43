// Hello, Ping, and Clear, Describe and Stats on the background worker.
#include "introspection.h"

#include <unistd.h>

#include <new>
#include <random>

#include "kvstash/version.h"

namespace kvstash::server {

namespace {

std::array<uint8_t, 16> NewBootId() {
  std::random_device random;
  std::array<uint8_t, 16> id{};
  for (uint8_t& byte : id) byte = uint8_t(random());
  return id;
}

}  // namespace

Introspection::Introspection(const config::ServerConfig& config, Stats& stats,
                             DeferredReplies& deferred, const Backend& backend, const L1Pool& pool,
                             ChunkStore& store, const TierChain& tiers,
                             const Registrations& registrations, AccessPolicy access)
    : config_(config),
      boot_id_(NewBootId()),
      started_(Clock::now()),
      stats_(stats),
      deferred_(deferred),
      backend_(&backend),
      pool_(&pool),
      store_(&store),
      tiers_(&tiers),
      registry_(&registrations.registry()),
      access_(access),
      background_(std::make_unique<runtime::WorkQueue>(1, "kvstash-intro")) {}

Introspection::~Introspection() = default;

Introspection::Reply Introspection::Hello(const Request&, const HelloRequest& m) {
  if (m.protocol_version != proto::kProtocolVersion) {
    return Status(StatusCode::kUnsupportedVersion, "client speaks protocol " +
                                                       std::to_string(m.protocol_version) +
                                                       ", kvstashd " KVSTASH_VERSION " speaks " +
                                                       std::to_string(proto::kProtocolVersion));
  }
  HelloReply reply;
  reply.server_version = KVSTASH_VERSION;
  reply.boot_id = boot_id_;
  reply.chunk_tokens = config_.chunk_tokens;
  reply.max_chunks_per_request = config_.max_chunks_per_request;
  reply.max_message_bytes = uint64_t(config_.max_message_mb) << 20;
  reply.backend = backend_->name();
  reply.peer_timeout_ms = config_.peer_timeout_ms;
  reply.pid = uint32_t(getpid());  // for the engine's copy fences
  return std::optional<ReplyBody>(std::move(reply));
}

// Clear scans the stored chunks (and, for a non-admin, the registrations):
// it runs on the background worker like Describe and Stats.
Introspection::Reply Introspection::Clear(const Request& r, const ClearRequest& m) {
  KVSTASH_RETURN_IF_ERROR(deferred_.CheckInFlight(r.peer.id));
  deferred_.Begin(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r, m] {
    Answer(r, [&] {
      // Across tenants only for admins; anyone else clears the scopes of the
      // registrations its own connection holds.
      const uint64_t cleared =
          store_->Clear(access_.IsAdmin(r.peer)
                            ? registry_->ScopeMatcher(m.model, m.tenant_salt)
                            : registry_->OwnedScopeMatcher(r.peer.id, m.model, m.tenant_salt));
      return ReplyBody(ClearReply{cleared});
    });
  });
  return std::optional<ReplyBody>();
}

// Describe and Stats take time in proportion to the registrations: they are
// built on the background worker, never on the frontend, and count against
// the client's requests in flight.
Introspection::Reply Introspection::Describe(const Request& r) {
  KVSTASH_RETURN_IF_ERROR(deferred_.CheckInFlight(r.peer.id));
  deferred_.Begin(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r] {
    Answer(r, [&] {
      return ReplyBody(DescribeReply{DescribeJson(r.peer.id, access_.IsAdmin(r.peer))});
    });
  });
  return std::optional<ReplyBody>();
}

Introspection::Reply Introspection::StatsReply(const Request& r) {
  KVSTASH_RETURN_IF_ERROR(deferred_.CheckInFlight(r.peer.id));
  deferred_.Begin(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r] {
    Answer(r, [&] {
      return ReplyBody(
          server::StatsReply{stats_.ReadCounters(), StatsJson(r.peer.id, access_.IsAdmin(r.peer))});
    });
  });
  return std::optional<ReplyBody>();
}

void Introspection::Answer(const Request& r, const std::function<ReplyBody()>& build) {
  std::optional<ReplyBody> reply;
  try {
    reply = build();
  } catch (const std::bad_alloc&) {
    Stats::Add(stats_.requests_out_of_memory);
  }
  introspecting_.fetch_sub(1);
  if (reply) {
    try {
      deferred_.Finish(r, *reply);
      return;
    } catch (const std::bad_alloc&) {
      // Finish throws only while encoding, before it counts anything.
      Stats::Add(stats_.requests_out_of_memory);
    }
  }
  deferred_.Fail(r, Status::Exhausted("kvstashd ran out of memory building this reply (a limit "
                                      "of the machine or of its mappings); try again"));
}

Introspection::Reply Introspection::Ping(const Request&) {
  PingReply reply;
  reply.uptime_ms = uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  reply.pool_bytes = pool_->capacity_bytes();
  reply.pool_ready_bytes = pool_->ready_bytes();
  return std::optional<ReplyBody>(reply);
}

}  // namespace kvstash::server
