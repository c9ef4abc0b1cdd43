// The harness behind the request fuzzer.
#include "fuzz_session.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>
#include <thread>

#include "fuzz_messages.h"
#include "kvstash/backends/backend_factory.h"

namespace kvstash::fuzz {
namespace {

constexpr size_t kMaxIds = 8;
// The fuzzing process itself is the engine: its credentials open the shm
// regions it creates, as an ipc peer's would.
server::Peer FuzzPeer() {
  return server::Peer{"fuzz-peer", server::PeerCredentials{::getuid(), ::getgid(), ::getpid()}};
}

// The L1 pool is pinned in the background: true once all of it is ready,
// read from the gauges the metrics endpoint shows.
bool L1Ready(const server::Service& service) {
  uint64_t capacity = 0, ready = 0;
  for (const server::Gauge& g : service.ReadStats().gauges) {
    if (std::string_view(g.name) == "l1_capacity_bytes") capacity = g.value;
    if (std::string_view(g.name) == "l1_ready_bytes") ready = g.value;
  }
  return capacity > 0 && ready >= capacity;
}

[[noreturn]] void Die(const std::string& what) {
  std::fprintf(stderr, "kvstash fuzz harness: %s\n", what.c_str());
  std::abort();
}

config::ServerConfig HarnessConfig() {
  config::ServerConfig config;
  config.backend = config::BackendKind::kHost;
  config.l1_gb = 8.0 / 1024;  // 8 MiB
  config.l1_slice_mb = 1;
  config.chunk_tokens = kChunkTokens;
  config.max_chunks_per_request = 64;
  config.max_message_mb = 1;
  config.lease_ms = 1000;
  config.peer_timeout_ms = 0;  // no time-dependent drops between inputs
  config.copy_threads = 2;
  config.pin_threads = 1;
  return config;
}

// Sets a uint64 field that the message carries (absent fields stay absent).
template <typename T>
void SetId(const T* table, flatbuffers::voffset_t field, uint64_t value) {
  auto* raw = reinterpret_cast<flatbuffers::Table*>(const_cast<T*>(table));
  raw->SetField<uint64_t>(field, value, 0);
}

}  // namespace

FuzzSession::FuzzSession() {
  shm_fd_ = shm_open(kShmName, O_CREAT | O_RDWR, 0600);
  if (shm_fd_ < 0 || ftruncate(shm_fd_, off_t(ShmBytes())) != 0) {
    Die(std::string("cannot create shared memory ") + kShmName + ": " + std::strerror(errno));
  }
  auto service = server::Service::Create(HarnessConfig(), backends::CreateHostBackend(2), replies_);
  if (!service.ok()) Die("cannot create the Service: " + service.status().ToString());
  service_ = std::move(*service);
  // The pool is prepared in the background: wait, so stores reach the copies.
  while (!L1Ready(*service_)) {
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

FuzzSession::~FuzzSession() {
  service_.reset();
  if (shm_fd_ >= 0) close(shm_fd_);
  shm_unlink(kShmName);
}

void FuzzSession::Run(const uint8_t* data, size_t size) {
  registrations_.clear();
  leases_.clear();
  for (const auto& [message, length] : Unframe(data, size)) {
    // FlatBuffers reads scalars in place: give every message aligned,
    // writable storage (RewriteIds writes into it).
    std::vector<uint8_t> copy(message, message + length);
    HandleOne(copy);
  }
  // Undo the input's registrations and leases so the next input starts from
  // the same state, and drop what it stored.
  const std::vector<uint64_t> leases = leases_;
  for (uint64_t lease : leases) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<uint8_t> m = proto::Finish(fbb, 1, wire::Body::ReleaseRequest,
                                           wire::CreateReleaseRequest(fbb, lease).Union());
    HandleOne(m);
  }
  const std::vector<uint64_t> registrations = registrations_;
  for (uint64_t id : registrations) {
    flatbuffers::FlatBufferBuilder fbb;
    std::vector<uint8_t> m = proto::Finish(fbb, 1, wire::Body::UnregisterKVRequest,
                                           wire::CreateUnregisterKVRequest(fbb, id).Union());
    HandleOne(m);
  }
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<uint8_t> clear = proto::Finish(fbb, 1, wire::Body::ClearRequest,
                                             wire::CreateClearRequestDirect(fbb, "", "").Union());
  HandleOne(clear);
  service_->Tick(/*socket_drained=*/true);
}

void FuzzSession::HandleOne(std::vector<uint8_t>& message) {
  RewriteIds(message);
  std::optional<proto::Bytes> reply = service_->Handle(FuzzPeer(), message.data(), message.size());
  if (reply) TakeReply(reply->data(), reply->size());
  // Deferred replies (Store, Retrieve, UnregisterKV) come from the transfer
  // workers; a request that never answers hangs here and libFuzzer reports
  // the timeout.
  while (service_->deferred_in_flight() > 0) std::this_thread::yield();
  for (const server::OutgoingReply& queued : replies_.TakeAll()) {
    TakeReply(queued.bytes.data(), queued.bytes.size());
  }
}

void FuzzSession::TakeReply(const uint8_t* data, size_t size) {
  // Every reply the daemon sends must itself pass every check a client runs.
  Result<const wire::Envelope*> envelope = proto::VerifyEnvelope(data, size, size_t{1} << 30);
  if (!envelope.ok())
    Die("the daemon sent a reply that does not verify: " + envelope.status().ToString());
  const wire::Envelope& e = **envelope;
  if (e.body_type() == wire::Body::RegisterKVReply && registrations_.size() < kMaxIds) {
    registrations_.push_back(e.body_as_RegisterKVReply()->registration_id());
  }
  if (e.body_type() == wire::Body::LookupReply && e.body_as_LookupReply()->lease_id() != 0 &&
      leases_.size() < kMaxIds) {
    leases_.push_back(e.body_as_LookupReply()->lease_id());
  }
}

void FuzzSession::RewriteIds(std::vector<uint8_t>& message) const {
  // Only messages that verify are rewritten; the rest go in as they are.
  Result<const wire::Envelope*> envelope =
      proto::VerifyEnvelope(message.data(), message.size(), message.size());
  if (!envelope.ok()) return;
  const wire::Envelope& e = **envelope;
  auto registration = [this](uint64_t id) {
    return id >= 1 && id <= registrations_.size() ? registrations_[id - 1] : id;
  };
  auto lease = [this](uint64_t id) {
    return id >= 1 && id <= leases_.size() ? leases_[id - 1] : id;
  };
  switch (e.body_type()) {
    case wire::Body::StoreRequest: {
      const auto* m = e.body_as_StoreRequest();
      SetId(m, wire::StoreRequest::VT_REGISTRATION_ID, registration(m->registration_id()));
      break;
    }
    case wire::Body::RetrieveRequest: {
      const auto* m = e.body_as_RetrieveRequest();
      SetId(m, wire::RetrieveRequest::VT_REGISTRATION_ID, registration(m->registration_id()));
      SetId(m, wire::RetrieveRequest::VT_LEASE_ID, lease(m->lease_id()));
      break;
    }
    case wire::Body::LookupRequest: {
      const auto* m = e.body_as_LookupRequest();
      SetId(m, wire::LookupRequest::VT_REGISTRATION_ID, registration(m->registration_id()));
      break;
    }
    case wire::Body::UnregisterKVRequest: {
      const auto* m = e.body_as_UnregisterKVRequest();
      SetId(m, wire::UnregisterKVRequest::VT_REGISTRATION_ID, registration(m->registration_id()));
      break;
    }
    case wire::Body::ReleaseRequest: {
      const auto* m = e.body_as_ReleaseRequest();
      SetId(m, wire::ReleaseRequest::VT_LEASE_ID, lease(m->lease_id()));
      break;
    }
    default: break;
  }
}

}  // namespace kvstash::fuzz
