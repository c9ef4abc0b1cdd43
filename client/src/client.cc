// kvstash::Client: encodes each call on the calling thread, hands it to the
// I/O thread, and decodes the reply into the call's future.
#include "kvstash/client.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "decode.h"
#include "encode.h"
#include "transport.h"

namespace kvstash {

namespace {

// KVSTASH_SHM_CHANNEL=off turns the shared-memory channel off for every
// client of the process (also those of the C API and Python).
bool ShmChannelWanted() {
  const char* value = std::getenv("KVSTASH_SHM_CHANNEL");
  return value == nullptr || std::strcmp(value, "off") != 0;
}

// KVSTASH_SHM_CHANNEL_RING_BYTES: each ring's size (a power of two, 4 KiB
// to 64 MiB); tests make it small to fill it.
// The library's edge with the environment: $KVSTASH_SOCKET (empty when
// unset) for ClientEndpoint.
std::string SocketFromEnvironment() {
  const char* value = std::getenv(kSocketEnvVar);
  return value != nullptr ? value : "";
}

uint64_t ChannelRingBytes() {
  const char* value = std::getenv("KVSTASH_SHM_CHANNEL_RING_BYTES");
  if (value == nullptr || *value == '\0') return channel::kDefaultRingBytes;
  return std::strtoull(value, nullptr, 10);
}

}  // namespace

class Client::Impl {
 public:
  explicit Impl(std::unique_ptr<client::Transport> transport) : transport_(std::move(transport)) {}

  client::Transport& transport() { return *transport_; }

  // Sends the request that encode(header) builds; done receives
  // decode(reply) or why there is none, exactly once. R is Status or
  // Result<T>. registration_id: the engine's id of the registration the
  // request names (0: none); encode writes header.registration_id, the
  // daemon's id for it.
  template <typename R, typename Encode, typename Decode>
  void Call(client::RequestKind kind, uint64_t registration_id, Encode encode, Decode decode,
            std::function<void(R)> done) {
    client::ClientRequest request;
    request.unregisters = kind == client::RequestKind::kUnregisterKV;
    request.copies_blocks =
        kind == client::RequestKind::kStore || kind == client::RequestKind::kRetrieve;
    request.id = transport_->NextRequestId();
    request.kind = kind;
    request.timeout = transport_->timeout();
    request.deadline = client::Clock::now() + request.timeout;
    request.registration_id = registration_id;
    request.wire_registration_id = wire_id(registration_id);
    const client::Header header{request.id,
                                uint64_t(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                             request.deadline.time_since_epoch())
                                             .count()),
                                request.wire_registration_id};
    request.bytes = encode(header);
    request.on_reply = [done = std::move(done),
                        decode = std::move(decode)](Result<client::Reply> reply) {
      done(reply.ok() ? R(decode(*reply)) : R(reply.status()));
    };
    transport_->Submit(std::move(request));
  }

  // The same, answered through a future.
  template <typename R, typename Encode, typename Decode>
  std::future<R> Call(client::RequestKind kind, uint64_t registration_id, Encode encode,
                      Decode decode) {
    auto promise = std::make_shared<std::promise<R>>();
    std::future<R> future = promise->get_future();
    Call<R>(kind, registration_id, std::move(encode), std::move(decode),
            std::function<void(R)>([promise](R r) { promise->set_value(std::move(r)); }));
    return future;
  }

  // The daemon id to encode for the engine's registration id.
  uint64_t wire_id(uint64_t registration_id) const {
    return registration_id == 0 ? 0 : transport_->registrations().WireId(registration_id);
  }
  client::RegistrationTable& registrations() { return transport_->registrations(); }

  // TooLarge when a request carries more chunks or keys than the daemon takes.
  Status CheckCount(client::RequestKind kind, size_t count) const {
    const uint32_t limit = transport_->server_info().max_chunks_per_request;
    if (limit != 0 && count > limit) {
      return Status::TooLarge(std::string(client::NameOf(kind)) + " carries " +
                              std::to_string(count) +
                              " chunks, over kvstashd's max_chunks_per_request of " +
                              std::to_string(limit) + "; split it");
    }
    return Status::Ok();
  }

 private:
  // Last: destroyed first, so no reply handler outlives what it touches.
  std::unique_ptr<client::Transport> transport_;
};

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  client::SessionOptions session{ClientEndpoint(options.socket, SocketFromEnvironment()),
                                 options.request_timeout, std::move(options.client_name),
                                 std::move(options.log),
                                 std::chrono::microseconds(options.busy_poll_us)};
  session.shm_channel = options.shm_channel && ShmChannelWanted();
  session.channel_ring_bytes = ChannelRingBytes();
  std::future<Result<ServerInfo>> hello;
  auto transport = client::Transport::Start(std::move(session), hello);
  if (!transport.ok()) return transport.status();
  auto impl = std::make_unique<Impl>(std::move(transport.value()));
  Result<ServerInfo> info = hello.get();
  if (!info.ok()) return info.status();
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Client::~Client() = default;

ServerInfo Client::server_info() const { return impl_->transport().server_info(); }

std::future<Result<RegisteredKv>> Client::RegisterKV(const RegisterOptions& options) {
  Impl* impl = impl_.get();
  // Without a fence (it could not be created) the registration's requests
  // are cut off by their deadlines alone (docs/protocol.md "The copy fence").
  std::shared_ptr<client::GiveUpFence> fence;
  if (impl->transport().fences()) {
    Result<std::shared_ptr<client::GiveUpFence>> created = client::GiveUpFence::Create();
    if (created.ok()) fence = std::move(*created);
  }
  return impl_->Call<Result<RegisteredKv>>(
      client::RequestKind::kRegisterKV, 0,
      [&](const client::Header& h) {
        return client::EncodeRegisterKV(h, options, fence ? fence->name() : std::string());
      },
      // Kept for registering again after a restart of kvstashd.
      [impl, options, fence](const client::Reply& reply) -> Result<RegisteredKv> {
        if (fence) fence->Unlink();  // opened by now, or never
        Result<RegisteredKv> registration = client::DecodeRegisterKV(*reply.envelope);
        if (!registration.ok()) return registration;
        return impl->registrations().Add(std::move(registration.value()), options,
                                         impl->transport().server_info().boot_id,
                                         client::DecodeFenced(*reply.envelope) ? fence : nullptr);
      });
}

std::future<Status> Client::UnregisterKV(uint64_t registration_id) {
  Impl* impl = impl_.get();
  return impl_->Call<Status>(
      client::RequestKind::kUnregisterKV, registration_id,
      [&](const client::Header& h) { return client::EncodeUnregisterKV(h, h.registration_id); },
      [impl, registration_id](const client::Reply& reply) {
        Status status = client::DecodeUnregisterKV(*reply.envelope);
        if (status.ok()) impl->registrations().Remove(registration_id, /*drained=*/true);
        return status;
      });
}

namespace {

template <typename R>
std::pair<std::future<R>, Client::Done<R>> FutureAndDone() {
  auto promise = std::make_shared<std::promise<R>>();
  std::future<R> future = promise->get_future();
  return {std::move(future), [promise](R r) { promise->set_value(std::move(r)); }};
}

}  // namespace

std::future<Result<std::vector<ChunkOutcome>>> Client::Store(uint64_t registration_id,
                                                             const ChunkList& chunks) {
  auto [future, done] = FutureAndDone<Result<std::vector<ChunkOutcome>>>();
  Store(registration_id, chunks, std::move(done));
  return std::move(future);
}

void Client::Store(uint64_t registration_id, const ChunkList& chunks,
                   Done<Result<std::vector<ChunkOutcome>>> done) {
  using R = Result<std::vector<ChunkOutcome>>;
  if (Status count = impl_->CheckCount(client::RequestKind::kStore, chunks.size()); !count.ok())
    return done(count);
  const size_t n = chunks.size();
  impl_->Call<R>(
      client::RequestKind::kStore, registration_id,
      [&](const client::Header& h) { return client::EncodeStore(h, h.registration_id, chunks); },
      [n](const client::Reply& reply) { return client::DecodeStore(*reply.envelope, n); },
      std::move(done));
}

std::future<Result<std::vector<ChunkOutcome>>> Client::Retrieve(uint64_t registration_id,
                                                                const ChunkList& chunks,
                                                                uint32_t skip_tokens,
                                                                uint64_t lease_id) {
  auto [future, done] = FutureAndDone<Result<std::vector<ChunkOutcome>>>();
  Retrieve(registration_id, chunks, skip_tokens, lease_id, std::move(done));
  return std::move(future);
}

void Client::Retrieve(uint64_t registration_id, const ChunkList& chunks, uint32_t skip_tokens,
                      uint64_t lease_id, Done<Result<std::vector<ChunkOutcome>>> done) {
  using R = Result<std::vector<ChunkOutcome>>;
  if (Status count = impl_->CheckCount(client::RequestKind::kRetrieve, chunks.size());
      !count.ok()) {
    return done(count);
  }
  const size_t n = chunks.size();
  impl_->Call<R>(
      client::RequestKind::kRetrieve, registration_id,
      [&](const client::Header& h) {
        return client::EncodeRetrieve(h, h.registration_id, chunks, skip_tokens, lease_id);
      },
      [n](const client::Reply& reply) { return client::DecodeRetrieve(*reply.envelope, n); },
      std::move(done));
}

namespace {

// The reply handler of a request signalling on a board: an error releases
// its slots from the CPU (status words first) so that no stream waits for a
// daemon that will not write them. Slots go back to the board once the reply
// came; after a timeout or a lost daemon they stay taken, since a daemon
// that is only late could still write them.
Client::Done<Result<std::vector<ChunkOutcome>>> ReleasingDone(
    CompletionBoard& board, BoardSignal signal, bool store,
    Client::Done<Result<std::vector<ChunkOutcome>>> done) {
  return [&board, signal, store, done = std::move(done)](Result<std::vector<ChunkOutcome>> result) {
    if (!result.ok()) {
      // A store's gate (its first slot) is the engine's.
      board.Release(signal, store ? 1 : 0, uint32_t(result.status().code()));
    }
    const StatusCode code = result.ok() ? StatusCode::kOk : result.status().code();
    if (code != StatusCode::kTimedOut && code != StatusCode::kUnavailable &&
        code != StatusCode::kCancelled) {
      board.Give(signal);
    }
    done(std::move(result));
  };
}

}  // namespace

Result<GpuTransfer> Client::RetrieveOnStream(uint64_t registration_id, const ChunkList& chunks,
                                             CompletionBoard& board, void* stream,
                                             uint32_t skip_tokens, uint64_t lease_id,
                                             uint32_t layer_ranges) {
  auto [future, done] = FutureAndDone<Result<std::vector<ChunkOutcome>>>();
  Result<BoardSignal> signal = RetrieveOnStream(registration_id, chunks, board, stream, skip_tokens,
                                                lease_id, layer_ranges, std::move(done));
  if (!signal.ok()) return signal.status();
  return GpuTransfer{*signal, std::move(future)};
}

Result<BoardSignal> Client::RetrieveOnStream(uint64_t registration_id, const ChunkList& chunks,
                                             CompletionBoard& board, void* stream,
                                             uint32_t skip_tokens, uint64_t lease_id,
                                             uint32_t layer_ranges,
                                             Done<Result<std::vector<ChunkOutcome>>> done) {
  using R = Result<std::vector<ChunkOutcome>>;
  KVSTASH_RETURN_IF_ERROR(impl_->CheckCount(client::RequestKind::kRetrieve, chunks.size()));
  Result<BoardSignal> signal = board.Take(layer_ranges);
  if (!signal.ok()) return signal.status();
  if (stream != nullptr && layer_ranges == 1) {
    // Enqueued before the request leaves: the wait is in the stream before
    // the daemon can release it.
    if (Status waited = board.WaitAll(stream, *signal); !waited.ok()) {
      board.Give(*signal);
      return waited;
    }
  }
  const size_t n = chunks.size();
  const BoardSignal asked = *signal;
  impl_->Call<R>(
      client::RequestKind::kRetrieve, registration_id,
      [&](const client::Header& h) {
        return client::EncodeRetrieve(h, h.registration_id, chunks, skip_tokens, lease_id, &asked);
      },
      [n](const client::Reply& reply) { return client::DecodeRetrieve(*reply.envelope, n); },
      ReleasingDone(board, asked, /*store=*/false, std::move(done)));
  return asked;
}

Result<GpuTransfer> Client::StoreOnStream(uint64_t registration_id, const ChunkList& chunks,
                                          CompletionBoard& board, void* stream) {
  auto [future, done] = FutureAndDone<Result<std::vector<ChunkOutcome>>>();
  Result<BoardSignal> signal =
      StoreOnStream(registration_id, chunks, board, stream, std::move(done));
  if (!signal.ok()) return signal.status();
  return GpuTransfer{*signal, std::move(future)};
}

Result<BoardSignal> Client::StoreOnStream(uint64_t registration_id, const ChunkList& chunks,
                                          CompletionBoard& board, void* stream,
                                          Done<Result<std::vector<ChunkOutcome>>> done) {
  using R = Result<std::vector<ChunkOutcome>>;
  KVSTASH_RETURN_IF_ERROR(impl_->CheckCount(client::RequestKind::kStore, chunks.size()));
  Result<BoardSignal> signal = board.Take(2);
  if (!signal.ok()) return signal.status();
  if (stream != nullptr) {
    // The gate, after everything the engine enqueued so far on its stream.
    if (Status gated = board.SignalGate(stream, *signal); !gated.ok()) {
      board.Give(*signal);
      return gated;
    }
  }
  const size_t n = chunks.size();
  const BoardSignal asked = *signal;
  impl_->Call<R>(
      client::RequestKind::kStore, registration_id,
      [&](const client::Header& h) {
        return client::EncodeStore(h, h.registration_id, chunks, &asked);
      },
      [n](const client::Reply& reply) { return client::DecodeStore(*reply.envelope, n); },
      ReleasingDone(board, asked, /*store=*/true, std::move(done)));
  return asked;
}

std::future<Result<LookupResult>> Client::Lookup(uint64_t registration_id,
                                                 const std::vector<ChunkKey>& keys,
                                                 uint32_t lease_ms, bool prefetch) {
  auto [future, done] = FutureAndDone<Result<LookupResult>>();
  Lookup(registration_id, keys, lease_ms, prefetch, std::move(done));
  return std::move(future);
}

void Client::Lookup(uint64_t registration_id, const std::vector<ChunkKey>& keys, uint32_t lease_ms,
                    Done<Result<LookupResult>> done) {
  Lookup(registration_id, keys, lease_ms, false, std::move(done));
}

void Client::Lookup(uint64_t registration_id, const std::vector<ChunkKey>& keys, uint32_t lease_ms,
                    bool prefetch, Done<Result<LookupResult>> done) {
  if (Status count = impl_->CheckCount(client::RequestKind::kLookup, keys.size()); !count.ok())
    return done(count);
  impl_->Call<Result<LookupResult>>(
      client::RequestKind::kLookup, registration_id,
      [&](const client::Header& h) {
        return client::EncodeLookup(h, h.registration_id, keys, lease_ms, prefetch);
      },
      [](const client::Reply& reply) { return client::DecodeLookup(*reply.envelope); },
      std::move(done));
}

std::future<Result<uint32_t>> Client::Release(uint64_t lease_id) {
  auto [future, done] = FutureAndDone<Result<uint32_t>>();
  Release(lease_id, std::move(done));
  return std::move(future);
}

void Client::Release(uint64_t lease_id, Done<Result<uint32_t>> done) {
  impl_->Call<Result<uint32_t>>(
      client::RequestKind::kRelease, 0,
      [&](const client::Header& h) { return client::EncodeRelease(h, lease_id); },
      [](const client::Reply& reply) { return client::DecodeRelease(*reply.envelope); },
      std::move(done));
}

std::future<Result<uint64_t>> Client::Clear(const std::string& model,
                                            const std::string& tenant_salt) {
  return impl_->Call<Result<uint64_t>>(
      client::RequestKind::kClear, 0,
      [&](const client::Header& h) { return client::EncodeClear(h, model, tenant_salt); },
      [](const client::Reply& reply) { return client::DecodeClear(*reply.envelope); });
}

std::future<Result<std::string>> Client::Describe() {
  return impl_->Call<Result<std::string>>(
      client::RequestKind::kDescribe, 0,
      [](const client::Header& h) { return client::EncodeDescribe(h); },
      [](const client::Reply& reply) { return client::DecodeDescribe(*reply.envelope); });
}

std::future<Result<StatsResult>> Client::Stats() {
  return impl_->Call<Result<StatsResult>>(
      client::RequestKind::kStats, 0,
      [](const client::Header& h) { return client::EncodeStats(h); },
      [](const client::Reply& reply) { return client::DecodeStats(*reply.envelope); });
}

std::future<Result<PoolReadiness>> Client::PoolReady() {
  return impl_->Call<Result<PoolReadiness>>(
      client::RequestKind::kPoolReadiness, 0,
      [](const client::Header& h) { return client::EncodePing(h); },
      [](const client::Reply& reply) { return client::DecodePoolReadiness(*reply.envelope); });
}

std::future<Result<uint64_t>> Client::Ping() {
  return impl_->Call<Result<uint64_t>>(
      client::RequestKind::kPing, 0, [](const client::Header& h) { return client::EncodePing(h); },
      [](const client::Reply& reply) { return client::DecodePing(*reply.envelope); });
}

}  // namespace kvstash
