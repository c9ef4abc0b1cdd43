// Construction of the shared state and the parts, and dispatch.
#include "service.h"

#include <spdlog/spdlog.h>

#include <new>
#include <thread>

namespace kvstash::server {

Service::Service(const config::ServerConfig& config, std::unique_ptr<Backend> backend,
                 ReplyQueue& replies)
    : config_(config),
      trace_(StageTrace::FromEnvironment("daemon")),
      backend_(std::move(backend)),
      deferred_(config_, stats_, replies, trace_.get()) {}

Service::~Service() {
  if (tiers_) tiers_->Shutdown();
}

Result<std::unique_ptr<Service>> Service::Create(const config::ServerConfig& config,
                                                 std::unique_ptr<Backend> backend,
                                                 ReplyQueue& replies) {
  Result<AccessPolicy> access =
      AccessPolicy::Create(config.admin_group == "none" ? "" : config.admin_group);
  if (!access.ok()) return access.status();
  std::unique_ptr<Service> service(new Service(config, std::move(backend), replies));
  const config::ServerConfig& c = service->config_;
  const uint64_t capacity = uint64_t(c.l1_gb * double(uint64_t{1} << 30));
  const uint64_t slab = uint64_t(c.l1_slice_mb) << 20;
  const uint32_t pin_threads =
      c.pin_threads ? c.pin_threads : std::max(1u, std::thread::hardware_concurrency());
  Result<std::unique_ptr<L1Pool>> pool =
      L1Pool::Create(capacity, slab, pin_threads, service->backend_->slab_hooks());
  if (!pool.ok()) return pool.status();
  service->pool_ = std::move(*pool);
  ChunkStore::LeaseLimits limits;
  limits.per_owner = c.max_leases_per_client;
  limits.total = c.max_leases;
  limits.leased_bytes = std::max<uint64_t>(
      1, uint64_t(double(service->pool_->capacity_bytes()) * c.max_leased_share));
  service->store_ = std::make_unique<ChunkStore>(*service->pool_, service->stats_, limits);
  Result<std::unique_ptr<TierChain>> tiers =
      TierChain::Create(c, *service->store_, service->stats_);
  if (!tiers.ok()) return tiers.status();
  service->tiers_ = std::move(*tiers);
  service->budget_ =
      std::make_unique<PeerBudget>(PeerBudget::LimitsFrom(c, PeerBudget::ReadMaxMapCount()));
  service->registrations_ = std::make_unique<Registrations>(
      c, service->stats_, service->deferred_, *service->backend_, service->pool_->slab_bytes(),
      *service->tiers_, *service->budget_);
  service->leases_ =
      std::make_unique<Leases>(c, service->stats_, service->deferred_, *service->store_,
                               *service->tiers_, *service->registrations_);
  service->transfers_ =
      std::make_unique<Transfers>(c, service->stats_, service->deferred_, *service->backend_,
                                  *service->store_, *service->tiers_, *service->registrations_);
  service->introspection_ = std::make_unique<Introspection>(
      c, service->stats_, service->deferred_, *service->backend_, *service->pool_, *service->store_,
      *service->tiers_, *service->registrations_, *access);
  return service;
}

void Service::BeginShutdown() {
  shutting_down_ = true;
  transfers_->StopCopies();
}

uint64_t Service::copies_in_flight() const { return transfers_->copies_in_flight(); }

uint64_t Service::replies_due() const {
  // Read apart, so either may have moved in between; a gated store counts
  // in both until its gate opens (or it ends), so at worst one turn's
  // guess is off.
  const uint64_t gated = transfers_->gates_waiting();
  const uint64_t deferred = deferred_.count();
  return deferred > gated ? deferred - gated : 0;
}

Service::Handled Service::Accept(const Peer& peer, const uint8_t* data, size_t size) {
  uint64_t request_id = 0;  // known once the envelope's structure verified
  try {
    return HandleMessage(peer, data, size, &request_id);
  } catch (const std::bad_alloc&) {
    Stats::Add(stats_.request_errors);
    Stats::Add(stats_.requests_out_of_memory);
    try {
      return {
          proto::ErrorMessage(
              request_id, Status::Exhausted("kvstashd ran out of memory handling this request (a "
                                            "limit of the machine or of its mappings); try again")),
          std::nullopt, request_id};
    } catch (const std::bad_alloc&) {
      return {};  // not even a reply fits: the client's deadline answers it
    }
  }
}

std::optional<proto::Bytes> Service::Handle(const Peer& peer, const uint8_t* data, size_t size) {
  Handled handled = Accept(peer, data, size);
  if (!handled.attach) return std::move(handled.reply);
  Stats::Add(stats_.request_errors);
  return proto::ErrorMessage(
      handled.request_id, Status::Unavailable("this kvstashd attaches no shared-memory channel"));
}

Service::Handled Service::HandleMessage(const Peer& peer, const uint8_t* data, size_t size,
                                        uint64_t* id) {
  const Clock::time_point received = Clock::now();
  Stats::Add(stats_.requests);
  uint64_t& request_id = *id;
  Result<const wire::Envelope*> envelope =
      proto::VerifyEnvelope(data, size, uint64_t(config_.max_message_mb) << 20, &request_id);
  if (!envelope.ok()) {
    Stats::Add(stats_.malformed_messages);
    Stats::Add(stats_.request_errors);
    return {proto::ErrorMessage(request_id, envelope.status())};
  }
  Request request{peer, (*envelope)->request_id(), RequestKind::kPing, received, std::nullopt};
  if (trace_) trace_->Mark(request.id, TraceStage::kDaemonReceived, received);
  registrations_->Heard(peer.id, request.start);
  if (shutting_down_) {
    Stats::Add(stats_.request_errors);
    return {proto::ErrorMessage(request.id, Status::Unavailable("kvstashd is shutting down"))};
  }
  if (const uint64_t deadline_ns = (*envelope)->deadline_ns(); deadline_ns != 0) {
    // The client's steady_clock: CLOCK_MONOTONIC, shared by every process of
    // the host (data requests name memory of this host).
    request.deadline = Clock::time_point(std::chrono::nanoseconds(deadline_ns));
    if (request.start >= *request.deadline) {
      Stats::Add(stats_.requests_timed_out);
      Stats::Add(stats_.request_errors);
      const auto late =
          std::chrono::duration_cast<std::chrono::microseconds>(request.start - *request.deadline)
              .count();
      return {proto::ErrorMessage(
          request.id, Status::TimedOut("the request's deadline passed " + std::to_string(late) +
                                       " us before kvstashd read it; nothing was done"))};
    }
  }
  if ((*envelope)->body_type() == wire::Body::AttachChannelRequest) {
    return {std::nullopt, DecodeAttachChannel(**envelope), request.id};  // the frontend's
  }
  Result<RequestBody> body =
      DecodeRequest(**envelope, DecodeLimits{config_.max_chunks_per_request});
  if (!body.ok()) {
    Stats::Add(stats_.request_errors);
    return {proto::ErrorMessage(request.id, body.status())};
  }
  request.kind = KindOf(*body);
  Reply reply = Dispatch(request, *body);
  // A copy was marked handled when it was queued (SubmitTransfer).
  if (!reply.ok() || reply->has_value())
    MarkStage(trace_.get(), request.id, TraceStage::kDaemonHandled);
  if (!reply.ok()) {
    Stats::Add(stats_.request_errors);
    deferred_.RecordLatency(request);
    return {proto::ErrorMessage(request.id, reply.status())};
  }
  if (!reply->has_value()) return {};  // the handler counted it in deferred_
  deferred_.RecordLatency(request);
  return {EncodeReply(request.id, **reply)};
}

Service::Reply Service::Dispatch(const Request& r, RequestBody& body) {
  switch (r.kind) {
    case RequestKind::kHello: return introspection_->Hello(r, std::get<HelloRequest>(body));
    case RequestKind::kRegisterKV:
      return registrations_->RegisterKV(r, std::get<RegisterRequest>(body));
    case RequestKind::kUnregisterKV:
      return registrations_->UnregisterKV(r, std::get<UnregisterRequest>(body));
    case RequestKind::kStore: return transfers_->Store(r, std::get<StoreRequest>(body));
    case RequestKind::kRetrieve: return transfers_->Retrieve(r, std::get<RetrieveRequest>(body));
    case RequestKind::kLookup: return leases_->Lookup(r, std::get<LookupRequest>(body));
    case RequestKind::kRelease: return leases_->Release(r, std::get<ReleaseRequest>(body));
    case RequestKind::kClear: return introspection_->Clear(r, std::get<ClearRequest>(body));
    case RequestKind::kDescribe: return introspection_->Describe(r);
    case RequestKind::kStats: return introspection_->StatsReply(r);
    case RequestKind::kPing: return introspection_->Ping(r);
    case RequestKind::kCount: break;
  }
  return Status::Internal("no handler for request kind " + std::to_string(int(r.kind)));
}

void Service::Tick(bool socket_drained) {
  const Clock::time_point now = Clock::now();
  store_->ExpireLeases(now);
  if (!socket_drained) return;
  registrations_->DropSilent(now);
}

}  // namespace kvstash::server
