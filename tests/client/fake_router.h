// A ROUTER socket standing in for kvstashd in client unit tests. The test
// thread owns it and decides what to answer, when, and in which order.
#pragma once

#include <array>
#include <chrono>
#include <optional>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "kvstash/client_types.h"
#include "kvstash/proto/codec.h"

namespace kvstash::testing {

// A fresh ipc:// endpoint under /tmp for this process.
std::string UniqueIpcEndpoint();

struct Received {
  std::string peer;
  proto::Bytes bytes;
  const wire::Envelope& envelope() const { return *wire::GetEnvelope(bytes.data()); }
  uint64_t request_id() const { return envelope().request_id(); }
  wire::Body type() const { return envelope().body_type(); }
};

// Owned by one thread (the test's).
class FakeRouter {
 public:
  explicit FakeRouter(std::string endpoint = UniqueIpcEndpoint());
  ~FakeRouter();  // closes the socket and removes an ipc:// socket file
  FakeRouter(const FakeRouter&) = delete;
  FakeRouter& operator=(const FakeRouter&) = delete;
  const std::string& endpoint() const { return endpoint_; }

  // The next request (verified), or nothing within the timeout; an
  // AttachChannel is refused on the way (the client then uses the socket).
  std::optional<Received> Receive(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  // The same, AttachChannel included.
  std::optional<Received> ReceiveAny(std::chrono::milliseconds timeout = std::chrono::seconds(5));
  void Reply(const Received& to, const proto::Bytes& bytes) { Send(to.peer, {bytes}); }
  void Send(const std::string& peer, const std::vector<proto::Bytes>& frames);
  // Receives a Hello and answers it; `pid`: the daemon process it names.
  bool AnswerHello(const std::array<uint8_t, 16>& boot_id, uint32_t max_chunks = 1024,
                   uint32_t pid = 0);

 private:
  std::string endpoint_;
  zmq::context_t context_{1};
  zmq::socket_t socket_;
};

// ---- canned replies ----

// pid: the daemon process it names (0: none, as an older kvstashd).
proto::Bytes HelloReply(uint64_t request_id, const std::array<uint8_t, 16>& boot_id,
                        uint32_t protocol_version = proto::kProtocolVersion,
                        uint32_t max_chunks = 1024, uint32_t pid = 0);
// fenced: the daemon holds the registration's copy fence, as kvstashd does
// on ipc (this one never copies, so it never holds a request's byte).
proto::Bytes RegisterKVReply(uint64_t request_id, uint64_t registration_id, bool fenced = true);
// One outcome per entry: (result, num_tokens).
proto::Bytes StoreReply(uint64_t request_id,
                        const std::vector<std::pair<ChunkResult, uint32_t>>& outcomes);
proto::Bytes PingReply(uint64_t request_id, uint64_t uptime_ms);

// A StoreRequest's chunk count.
size_t ChunkCount(const Received& store);

// The copy fence a RegisterKVRequest names ("" when none).
std::string FenceName(const Received& register_kv);

// An engine's copy fence held as kvstashd holds it (docs/protocol.md "The
// copy fence"), by the calling process: kvstashd's byte under a classic
// lock, which names this process to the client, and request bytes under
// read locks, as a lane that copies them. Closing it, or any other
// descriptor of the fence in this process, drops kvstashd's byte. Owned by
// one thread.
class DaemonFenceHold {
 public:
  // Opens the fence while its name exists (before the RegisterKV reply).
  static std::optional<DaemonFenceHold> Open(const std::string& name);
  DaemonFenceHold(DaemonFenceHold&& other) noexcept : fd_(other.fd_) { other.fd_ = -1; }
  DaemonFenceHold& operator=(DaemonFenceHold&&) = delete;
  ~DaemonFenceHold();
  bool Hold(uint64_t request_id);

 private:
  explicit DaemonFenceHold(int fd) : fd_(fd) {}
  int fd_;
};

}  // namespace kvstash::testing
