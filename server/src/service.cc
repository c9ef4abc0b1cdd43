// Construction, dispatch and the small requests (Hello, Release, Clear,
// Describe, Stats, Ping).
#include "service.h"

#include <spdlog/spdlog.h>

#include <random>
#include <thread>

#include "daemon_logger.h"
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

Service::Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
                 ReplyQueue& replies)
    : config_(config), boot_id_(NewBootId()), started_(Clock::now()),
      backend_(std::move(backend)), replies_(replies),
      peers_(std::chrono::milliseconds(config.peer_timeout_ms)) {}

Service::~Service() = default;

Result<std::unique_ptr<Service>> Service::Create(const config::ServerConfig& config,
                                                 std::unique_ptr<Backend> backend,
                                                 ReplyQueue& replies) {
  std::unique_ptr<Service> service(new Service(config, std::move(backend), replies));
  const uint64_t capacity = uint64_t(config.l1_gb * double(uint64_t{1} << 30));
  const uint64_t slab = uint64_t(config.l1_slice_mb) << 20;
  const uint32_t pin_threads =
      config.pin_threads ? config.pin_threads : std::max(1u, std::thread::hardware_concurrency());
  Result<std::unique_ptr<L1Pool>> pool =
      L1Pool::Create(capacity, slab, pin_threads, service->backend_->slab_hooks());
  if (!pool.ok()) return pool.status();
  service->pool_ = std::move(*pool);
  service->store_ = std::make_unique<ChunkStore>(*service->pool_, service->stats_);
  service->registry_ = std::make_unique<Registry>(*service->backend_, config.chunk_tokens,
                                                  service->pool_->slab_bytes());
  for (int d = 0; d < service->backend_->num_devices(); ++d) {
    service->workers_.push_back(std::make_unique<TransferWorker>(
        *service->backend_, d, std::chrono::microseconds(config.busy_poll_us)));
  }
  return service;
}

std::optional<proto::Bytes> Service::Handle(const PeerId& peer, const uint8_t* data,
                                            size_t size) {
  Stats::Add(stats_.requests);
  Result<const wire::Envelope*> envelope =
      proto::VerifyEnvelope(data, size, uint64_t(config_.max_message_mb) << 20);
  if (!envelope.ok()) {
    Stats::Add(stats_.malformed_messages);
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(0, envelope.status());
  }
  Request request{peer, (*envelope)->request_id(), RequestKind::kPing, Clock::now()};
  peers_.Heard(peer, request.start);
  if (shutting_down_) {
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(request.id, Status::Unavailable("kvstashd is shutting down"));
  }
  Reply reply = Dispatch(request, **envelope);
  if (!reply.ok()) {
    Stats::Add(stats_.request_errors);
    RecordLatency(request);
    return proto::ErrorMessage(request.id, reply.status());
  }
  if (!reply->has_value()) return std::nullopt;  // the handler counted it in deferred_
  RecordLatency(request);
  return std::move(**reply);
}

Service::Reply Service::Dispatch(Request& r, const wire::Envelope& e) {
  using wire::Body;
  switch (e.body_type()) {
    case Body::HelloRequest: r.kind = RequestKind::kHello; return Hello(r, *e.body_as_HelloRequest());
    case Body::RegisterKVRequest: r.kind = RequestKind::kRegisterKV; return RegisterKV(r, *e.body_as_RegisterKVRequest());
    case Body::UnregisterKVRequest: r.kind = RequestKind::kUnregisterKV; return UnregisterKV(r, *e.body_as_UnregisterKVRequest());
    case Body::StoreRequest: r.kind = RequestKind::kStore; return Store(r, *e.body_as_StoreRequest());
    case Body::RetrieveRequest: r.kind = RequestKind::kRetrieve; return Retrieve(r, *e.body_as_RetrieveRequest());
    case Body::LookupRequest: r.kind = RequestKind::kLookup; return Lookup(r, *e.body_as_LookupRequest());
    case Body::ReleaseRequest: r.kind = RequestKind::kRelease; return Release(r, *e.body_as_ReleaseRequest());
    case Body::ClearRequest: r.kind = RequestKind::kClear; return Clear(r, *e.body_as_ClearRequest());
    case Body::DescribeRequest: r.kind = RequestKind::kDescribe; return Describe(r);
    case Body::StatsRequest: r.kind = RequestKind::kStats; return StatsReply(r);
    case Body::PingRequest: r.kind = RequestKind::kPing; return Ping(r);
    default:
      return Status::InvalidArgument(std::string("\"") + wire::EnumNameBody(e.body_type()) +
                                     "\" is not a request");
  }
}

void Service::RecordLatency(const Request& request) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - request.start).count();
  stats_.latency(request.kind).Record(uint64_t(micros));
}

void Service::Finish(const Request& request, proto::Bytes bytes) {
  RecordLatency(request);
  replies_.Push(request.peer, std::move(bytes));
  deferred_.fetch_sub(1);
}

void Service::Tick() {
  const Clock::time_point now = Clock::now();
  store_->ExpireLeases(now);
  for (const PeerWatch::Gone& gone : peers_.TakeGone(now)) {
    for (uint64_t id : gone.registration_ids) {
      // Copies in flight keep it alive until they finish; then its
      // allocations close.
      std::shared_ptr<Registration> removed = registry_->Remove(id);
      if (!removed) continue;
      Stats::Add(stats_.registrations_dropped);
      Logger()->warn("dropped registration {} (model {}): its engine sent nothing for {} ms and "
                     "is taken for dead",
                     id, removed->request.model, gone.silent.count());
    }
  }
}

Result<std::shared_ptr<Registration>> Service::FindRegistration(uint64_t id) const {
  std::shared_ptr<Registration> registration = registry_->Find(id);
  if (!registration) {
    return Status::NotFound("unknown registration " + std::to_string(id) +
                            " (never registered, unregistered, or the daemon restarted)");
  }
  return registration;
}

Service::Reply Service::Hello(const Request& r, const wire::HelloRequest& m) {
  if (m.protocol_version() != proto::kProtocolVersion) {
    return Status(StatusCode::kUnsupportedVersion,
                  "client speaks protocol " + std::to_string(m.protocol_version()) +
                      ", kvstashd " KVSTASH_VERSION " speaks " +
                      std::to_string(proto::kProtocolVersion));
  }
  flatbuffers::FlatBufferBuilder b(256);
  auto version = b.CreateString(KVSTASH_VERSION);
  auto boot = b.CreateVector(boot_id_.data(), boot_id_.size());
  auto backend = b.CreateString(backend_->name());
  wire::HelloReplyBuilder reply(b);
  reply.add_protocol_version(proto::kProtocolVersion);
  reply.add_server_version(version);
  reply.add_boot_id(boot);
  reply.add_chunk_tokens(config_.chunk_tokens);
  reply.add_max_chunks_per_request(config_.max_chunks_per_request);
  reply.add_max_message_bytes(uint64_t(config_.max_message_mb) << 20);
  reply.add_backend(backend);
  reply.add_peer_timeout_ms(config_.peer_timeout_ms);
  auto offset = reply.Finish();
  return std::optional<proto::Bytes>(
      proto::Finish(b, r.id, wire::Body::HelloReply, offset.Union()));
}

Service::Reply Service::Release(const Request& r, const wire::ReleaseRequest& m) {
  std::optional<uint32_t> released = store_->Release(m.lease_id());
  if (!released) {
    return Status::NotFound("unknown lease " + std::to_string(m.lease_id()) +
                            " (released already, expired, or never granted)");
  }
  flatbuffers::FlatBufferBuilder fbb(64);
  auto body = wire::CreateReleaseReply(fbb, *released);
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::ReleaseReply, body.Union()));
}

Service::Reply Service::Clear(const Request& r, const wire::ClearRequest& m) {
  const std::string model = m.model() ? m.model()->str() : "";
  const std::string salt = m.tenant_salt() ? m.tenant_salt()->str() : "";
  const uint64_t cleared = store_->Clear(registry_->ScopeMatcher(model, salt));
  flatbuffers::FlatBufferBuilder fbb(64);
  auto body = wire::CreateClearReply(fbb, cleared);
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::ClearReply, body.Union()));
}

Service::Reply Service::Describe(const Request& r) {
  flatbuffers::FlatBufferBuilder fbb(4096);
  auto body = wire::CreateDescribeReplyDirect(fbb, DescribeJson().c_str());
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::DescribeReply, body.Union()));
}

Service::Reply Service::StatsReply(const Request& r) {
  flatbuffers::FlatBufferBuilder fbb(4096);
  std::vector<flatbuffers::Offset<wire::Counter>> counters;
  for (const Stats::Counter& c : stats_.ReadCounters()) {
    counters.push_back(wire::CreateCounterDirect(fbb, c.name, c.value));
  }
  auto body = wire::CreateStatsReplyDirect(fbb, &counters, StatsJson().c_str());
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::StatsReply, body.Union()));
}

proto::Bytes Service::GoodbyeMessage(const std::string& reason) {
  flatbuffers::FlatBufferBuilder fbb(64 + reason.size());
  auto body = wire::CreateGoodbyeDirect(fbb, reason.c_str());
  return proto::Finish(fbb, 0, wire::Body::Goodbye, body.Union());
}

Service::Reply Service::Ping(const Request& r) {
  flatbuffers::FlatBufferBuilder fbb(64);
  const auto uptime =
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count();
  auto body = wire::CreatePingReply(fbb, uint64_t(uptime), pool_->capacity_bytes(),
                                    pool_->ready_bytes());
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::PingReply, body.Union()));
}

}  // namespace kvstash::server
