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
                 ReplyQueue& replies, AccessPolicy access)
    : config_(config), boot_id_(NewBootId()), started_(Clock::now()),
      backend_(std::move(backend)), replies_(replies),
      peers_(std::chrono::milliseconds(config.peer_timeout_ms)), access_(access) {}

Service::~Service() = default;

Result<std::unique_ptr<Service>> Service::Create(const config::ServerConfig& config,
                                                 std::unique_ptr<Backend> backend,
                                                 ReplyQueue& replies) {
  Result<AccessPolicy> access =
      AccessPolicy::Create(config.admin_group == "none" ? "" : config.admin_group);
  if (!access.ok()) return access.status();
  std::unique_ptr<Service> service(new Service(config, std::move(backend), replies, *access));
  service->trace_ = StageTrace::FromEnvironment("daemon");
  const uint64_t capacity = uint64_t(config.l1_gb * double(uint64_t{1} << 30));
  const uint64_t slab = uint64_t(config.l1_slice_mb) << 20;
  const uint32_t pin_threads =
      config.pin_threads ? config.pin_threads : std::max(1u, std::thread::hardware_concurrency());
  Result<std::unique_ptr<L1Pool>> pool =
      L1Pool::Create(capacity, slab, pin_threads, service->backend_->slab_hooks());
  if (!pool.ok()) return pool.status();
  service->pool_ = std::move(*pool);
  ChunkStore::LeaseLimits limits;
  limits.per_owner = config.max_leases_per_client;
  limits.total = config.max_leases;
  limits.leased_bytes =
      std::max<uint64_t>(1, uint64_t(double(service->pool_->capacity_bytes()) * config.max_leased_share));
  service->store_ = std::make_unique<ChunkStore>(*service->pool_, service->stats_, limits);
  service->registry_ = std::make_unique<Registry>(*service->backend_, config.chunk_tokens,
                                                  service->pool_->slab_bytes());
  service->background_ = std::make_unique<BackgroundWorker>();
  for (int d = 0; d < service->backend_->num_devices(); ++d) {
    service->workers_.push_back(std::make_unique<TransferWorker>(
        *service->backend_, d, std::chrono::microseconds(config.busy_poll_us),
        service->trace_.get()));
  }
  return service;
}

std::optional<proto::Bytes> Service::Handle(const Peer& peer, const uint8_t* data,
                                            size_t size) {
  const Clock::time_point received = Clock::now();
  Stats::Add(stats_.requests);
  uint64_t request_id = 0;  // known once the envelope's structure verified
  Result<const wire::Envelope*> envelope =
      proto::VerifyEnvelope(data, size, uint64_t(config_.max_message_mb) << 20, &request_id);
  if (!envelope.ok()) {
    Stats::Add(stats_.malformed_messages);
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(request_id, envelope.status());
  }
  Request request{peer, (*envelope)->request_id(), RequestKind::kPing, received, std::nullopt};
  if (trace_) trace_->Mark(request.id, TraceStage::kDaemonReceived, received);
  peers_.Heard(peer.id, request.start);
  if (shutting_down_) {
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(request.id, Status::Unavailable("kvstashd is shutting down"));
  }
  if (const uint64_t deadline_ns = (*envelope)->deadline_ns(); deadline_ns != 0) {
    // The client's steady_clock: CLOCK_MONOTONIC, shared by every process of
    // the host (data requests name memory of this host).
    request.deadline = Clock::time_point(std::chrono::nanoseconds(deadline_ns));
    if (request.start >= *request.deadline) {
      Stats::Add(stats_.requests_timed_out);
      Stats::Add(stats_.request_errors);
      const auto late = std::chrono::duration_cast<std::chrono::microseconds>(
                            request.start - *request.deadline).count();
      return proto::ErrorMessage(
          request.id, Status::TimedOut("the request's deadline passed " + std::to_string(late) +
                                       " us before kvstashd read it; nothing was done"));
    }
  }
  Result<RequestBody> body =
      DecodeRequest(**envelope, DecodeLimits{config_.max_chunks_per_request});
  if (!body.ok()) {
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(request.id, body.status());
  }
  request.kind = KindOf(*body);
  Reply reply = Dispatch(request, *body);
  // A copy was marked handled when it was queued (SubmitTransfer).
  if (!reply.ok() || reply->has_value()) MarkStage(trace_.get(), request.id, TraceStage::kDaemonHandled);
  if (!reply.ok()) {
    Stats::Add(stats_.request_errors);
    RecordLatency(request);
    return proto::ErrorMessage(request.id, reply.status());
  }
  if (!reply->has_value()) return std::nullopt;  // the handler counted it in deferred_
  RecordLatency(request);
  return EncodeReply(request.id, **reply);
}

Service::Reply Service::Dispatch(const Request& r, RequestBody& body) {
  switch (r.kind) {
    case RequestKind::kHello: return Hello(r, std::get<HelloRequest>(body));
    case RequestKind::kRegisterKV: return RegisterKV(r, std::get<RegisterRequest>(body));
    case RequestKind::kUnregisterKV: return UnregisterKV(r, std::get<UnregisterRequest>(body));
    case RequestKind::kStore: return Store(r, std::get<StoreRequest>(body));
    case RequestKind::kRetrieve: return Retrieve(r, std::get<RetrieveRequest>(body));
    case RequestKind::kLookup: return Lookup(r, std::get<LookupRequest>(body));
    case RequestKind::kRelease: return Release(r, std::get<ReleaseRequest>(body));
    case RequestKind::kClear: return Clear(r, std::get<ClearRequest>(body));
    case RequestKind::kDescribe: return Describe(r);
    case RequestKind::kStats: return StatsReply(r);
    case RequestKind::kPing: return Ping(r);
    case RequestKind::kCount: break;
  }
  return Status::Internal("no handler for request kind " + std::to_string(int(r.kind)));
}

void Service::RecordLatency(const Request& request) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - request.start).count();
  stats_.latency(request.kind).Record(uint64_t(micros));
}

void Service::Finish(const Request& request, const ReplyBody& reply) {
  RecordLatency(request);
  EndDeferred(request.peer.id);
  MarkStage(trace_.get(), request.id, TraceStage::kReplyPushed);
  replies_.Push(request.peer.id, EncodeReply(request.id, reply), request.id);
  deferred_.fetch_sub(1);
}

Status Service::CheckInFlight(const PeerId& peer) {
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  auto found = in_flight_.find(peer);
  if (found == in_flight_.end() || found->second < config_.max_in_flight_per_client) {
    return Status::Ok();
  }
  Stats::Add(stats_.requests_refused_busy);
  return Status::Exhausted("this client has " + std::to_string(found->second) +
                           " requests awaiting their reply; the limit is " +
                           std::to_string(config_.max_in_flight_per_client) +
                           " (--max-in-flight-per-client)");
}

void Service::BeginDeferred(const PeerId& peer) {
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  ++in_flight_[peer];
  deferred_.fetch_add(1);
}

void Service::EndDeferred(const PeerId& peer) {
  std::lock_guard<std::mutex> lock(in_flight_mutex_);
  auto found = in_flight_.find(peer);
  if (found != in_flight_.end() && --found->second == 0) in_flight_.erase(found);
}

void Service::Tick(bool socket_drained) {
  const Clock::time_point now = Clock::now();
  store_->ExpireLeases(now);
  if (!socket_drained) return;
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

Result<std::shared_ptr<Registration>> Service::FindRegistration(uint64_t id,
                                                               const Peer& peer) const {
  std::shared_ptr<Registration> registration = registry_->Find(id);
  if (!registration || registration->owner != peer.id) {
    return Status::NotFound("unknown registration " + std::to_string(id) +
                            " (never registered, unregistered, or the daemon restarted)");
  }
  return registration;
}

Service::Reply Service::Hello(const Request&, const HelloRequest& m) {
  if (m.protocol_version != proto::kProtocolVersion) {
    return Status(StatusCode::kUnsupportedVersion,
                  "client speaks protocol " + std::to_string(m.protocol_version) +
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
  return std::optional<ReplyBody>(std::move(reply));
}

// Clear scans the stored chunks (and, for a non-admin, the registrations):
// it runs on the background worker like Describe and Stats.
Service::Reply Service::Clear(const Request& r, const ClearRequest& m) {
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));
  BeginDeferred(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r, m] {
    // Across tenants only for admins; anyone else clears the scopes of the
    // registrations its own connection holds.
    const uint64_t cleared =
        store_->Clear(access_.IsAdmin(r.peer)
                          ? registry_->ScopeMatcher(m.model, m.tenant_salt)
                          : registry_->OwnedScopeMatcher(r.peer.id, m.model, m.tenant_salt));
    introspecting_.fetch_sub(1);
    Finish(r, ClearReply{cleared});
  });
  return std::optional<ReplyBody>();
}

// Describe and Stats take time in proportion to the registrations: they are
// built on the background worker, never on the frontend, and count against
// the client's requests in flight.
Service::Reply Service::Describe(const Request& r) {
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));
  BeginDeferred(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r] {
    DescribeReply reply{DescribeJson(r.peer.id, access_.IsAdmin(r.peer))};
    introspecting_.fetch_sub(1);
    Finish(r, reply);
  });
  return std::optional<ReplyBody>();
}

Service::Reply Service::StatsReply(const Request& r) {
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));
  BeginDeferred(r.peer.id);
  introspecting_.fetch_add(1);
  background_->Post([this, r] {
    server::StatsReply reply{stats_.ReadCounters(), StatsJson()};
    introspecting_.fetch_sub(1);
    Finish(r, reply);
  });
  return std::optional<ReplyBody>();
}

proto::Bytes Service::GoodbyeMessage(const std::string& reason) {
  flatbuffers::FlatBufferBuilder fbb(64 + reason.size());
  auto body = wire::CreateGoodbyeDirect(fbb, reason.c_str());
  return proto::Finish(fbb, 0, wire::Body::Goodbye, body.Union());
}

Service::Reply Service::Ping(const Request&) {
  PingReply reply;
  reply.uptime_ms = uint64_t(
      std::chrono::duration_cast<std::chrono::milliseconds>(Clock::now() - started_).count());
  reply.pool_bytes = pool_->capacity_bytes();
  reply.pool_ready_bytes = pool_->ready_bytes();
  return std::optional<ReplyBody>(reply);
}

}  // namespace kvstash::server
