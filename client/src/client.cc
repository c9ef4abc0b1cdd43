// kvstash::Client: encodes each call on the calling thread, hands it to the
// I/O thread, and decodes the reply into the call's future.
#include "kvstash/client.h"

#include <mutex>
#include <unordered_map>
#include <utility>

#include "decode.h"
#include "encode.h"
#include "transport.h"

namespace kvstash {

class Client::Impl {
 public:
  explicit Impl(std::unique_ptr<client::Transport> transport) : transport_(std::move(transport)) {}

  client::Transport& transport() { return *transport_; }

  // Sends the request that encode(request_id) builds; the future receives
  // decode(reply) or why there is none. R is Status or Result<T>.
  // boot_epoch: nonzero to fail the request if kvstashd restarted since.
  template <typename R, typename Encode, typename Decode>
  std::future<R> Call(const char* kind, uint64_t boot_epoch, Encode encode, Decode decode) {
    auto promise = std::make_shared<std::promise<R>>();
    std::future<R> future = promise->get_future();
    client::Request request;
    request.id = transport_->NextRequestId();
    request.kind = kind;
    request.bytes = encode(request.id);
    request.boot_epoch = boot_epoch;
    request.on_reply = [promise, decode = std::move(decode)](Result<client::Reply> reply) {
      promise->set_value(reply.ok() ? R(decode(*reply)) : R(reply.status()));
    };
    transport_->Submit(std::move(request));
    return future;
  }

  // The boot epoch a registration of this client was made in; 0 for ids this
  // client did not register (the daemon judges those).
  uint64_t EpochOf(uint64_t registration_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    auto it = registration_epochs_.find(registration_id);
    return it == registration_epochs_.end() ? 0 : it->second;
  }
  void Remember(uint64_t registration_id, uint64_t epoch) {
    std::lock_guard<std::mutex> lock(mutex_);
    registration_epochs_[registration_id] = epoch;
  }
  void Forget(uint64_t registration_id) {
    std::lock_guard<std::mutex> lock(mutex_);
    registration_epochs_.erase(registration_id);
  }

  // TooLarge when a request carries more chunks or keys than the daemon takes.
  Status CheckCount(const char* what, size_t count) const {
    const uint32_t limit = transport_->server_info().max_chunks_per_request;
    if (limit != 0 && count > limit) {
      return Status::TooLarge(std::string(what) + " carries " + std::to_string(count) +
                              " chunks, over kvstashd's max_chunks_per_request of " +
                              std::to_string(limit) + "; split it");
    }
    return Status::Ok();
  }

 private:
  std::mutex mutex_;
  std::unordered_map<uint64_t, uint64_t> registration_epochs_;  // GUARDED_BY(mutex_)
  // Last: destroyed first, so no reply handler outlives what it touches.
  std::unique_ptr<client::Transport> transport_;
};

namespace {

template <typename R>
std::future<R> Ready(R value) {
  std::promise<R> promise;
  promise.set_value(std::move(value));
  return promise.get_future();
}

}  // namespace

Result<std::unique_ptr<Client>> Client::Connect(ClientOptions options) {
  client::SessionOptions session{std::move(options.socket), options.request_timeout,
                                 std::move(options.client_name), std::move(options.log),
                                 std::chrono::microseconds(options.busy_poll_us)};
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

std::future<Result<Registration>> Client::RegisterKV(const RegisterOptions& options) {
  Impl* impl = impl_.get();
  return impl_->Call<Result<Registration>>(
      "RegisterKV", 0, [&](uint64_t id) { return client::EncodeRegisterKV(id, options); },
      [impl](const client::Reply& reply) {
        Result<Registration> registration = client::DecodeRegisterKV(*reply.envelope);
        if (registration.ok()) impl->Remember(registration->id, reply.boot_epoch);
        return registration;
      });
}

std::future<Status> Client::UnregisterKV(uint64_t registration_id) {
  Impl* impl = impl_.get();
  return impl_->Call<Status>(
      "UnregisterKV", impl_->EpochOf(registration_id),
      [&](uint64_t id) { return client::EncodeUnregisterKV(id, registration_id); },
      [impl, registration_id](const client::Reply& reply) {
        Status status = client::DecodeUnregisterKV(*reply.envelope);
        if (status.ok()) impl->Forget(registration_id);
        return status;
      });
}

std::future<Result<std::vector<ChunkOutcome>>> Client::Store(
    uint64_t registration_id, const std::vector<ChunkBlocks>& chunks) {
  using R = Result<std::vector<ChunkOutcome>>;
  if (Status count = impl_->CheckCount("Store", chunks.size()); !count.ok()) return Ready<R>(count);
  const size_t n = chunks.size();
  return impl_->Call<R>(
      "Store", impl_->EpochOf(registration_id),
      [&](uint64_t id) { return client::EncodeStore(id, registration_id, chunks); },
      [n](const client::Reply& reply) { return client::DecodeStore(*reply.envelope, n); });
}

std::future<Result<std::vector<ChunkOutcome>>> Client::Retrieve(
    uint64_t registration_id, const std::vector<ChunkBlocks>& chunks, uint32_t skip_tokens,
    uint64_t lease_id) {
  using R = Result<std::vector<ChunkOutcome>>;
  if (Status count = impl_->CheckCount("Retrieve", chunks.size()); !count.ok()) {
    return Ready<R>(count);
  }
  const size_t n = chunks.size();
  return impl_->Call<R>(
      "Retrieve", impl_->EpochOf(registration_id),
      [&](uint64_t id) {
        return client::EncodeRetrieve(id, registration_id, chunks, skip_tokens, lease_id);
      },
      [n](const client::Reply& reply) { return client::DecodeRetrieve(*reply.envelope, n); });
}

std::future<Result<LookupResult>> Client::Lookup(uint64_t registration_id,
                                                 const std::vector<ChunkKey>& keys,
                                                 uint32_t lease_ms) {
  if (Status count = impl_->CheckCount("Lookup", keys.size()); !count.ok()) {
    return Ready<Result<LookupResult>>(count);
  }
  return impl_->Call<Result<LookupResult>>(
      "Lookup", impl_->EpochOf(registration_id),
      [&](uint64_t id) { return client::EncodeLookup(id, registration_id, keys, lease_ms); },
      [](const client::Reply& reply) { return client::DecodeLookup(*reply.envelope); });
}

std::future<Result<uint32_t>> Client::Release(uint64_t lease_id) {
  return impl_->Call<Result<uint32_t>>(
      "Release", 0, [&](uint64_t id) { return client::EncodeRelease(id, lease_id); },
      [](const client::Reply& reply) { return client::DecodeRelease(*reply.envelope); });
}

std::future<Result<uint64_t>> Client::Clear(const std::string& model,
                                            const std::string& tenant_salt) {
  return impl_->Call<Result<uint64_t>>(
      "Clear", 0, [&](uint64_t id) { return client::EncodeClear(id, model, tenant_salt); },
      [](const client::Reply& reply) { return client::DecodeClear(*reply.envelope); });
}

std::future<Result<std::string>> Client::Describe() {
  return impl_->Call<Result<std::string>>(
      "Describe", 0, [](uint64_t id) { return client::EncodeDescribe(id); },
      [](const client::Reply& reply) { return client::DecodeDescribe(*reply.envelope); });
}

std::future<Result<StatsResult>> Client::Stats() {
  return impl_->Call<Result<StatsResult>>(
      "Stats", 0, [](uint64_t id) { return client::EncodeStats(id); },
      [](const client::Reply& reply) { return client::DecodeStats(*reply.envelope); });
}

std::future<Result<uint64_t>> Client::Ping() {
  return impl_->Call<Result<uint64_t>>(
      "Ping", 0, [](uint64_t id) { return client::EncodePing(id); },
      [](const client::Reply& reply) { return client::DecodePing(*reply.envelope); });
}

}  // namespace kvstash
