// The fake ROUTER and its canned replies.
#include "fake_router.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>

#include "kvstash/copy_fence_bytes.h"

namespace kvstash::testing {

std::string UniqueIpcEndpoint() {
  static std::atomic<int> counter{0};
  return "ipc:///tmp/kvstash-client-test-" + std::to_string(::getpid()) + "-" +
         std::to_string(counter.fetch_add(1)) + ".sock";
}

FakeRouter::FakeRouter(std::string endpoint)
    : endpoint_(std::move(endpoint)), socket_(context_, zmq::socket_type::router) {
  socket_.set(zmq::sockopt::linger, 0);
  socket_.bind(endpoint_);
}

FakeRouter::~FakeRouter() {
  socket_.close();
  const std::string ipc = "ipc://";
  if (endpoint_.compare(0, ipc.size(), ipc) == 0) ::unlink(endpoint_.c_str() + ipc.size());
}

std::optional<Received> FakeRouter::Receive(std::chrono::milliseconds timeout) {
  // The client's shared-memory channel is not what these tests are about:
  // refuse it (the client then uses the socket alone) and read on.
  for (;;) {
    std::optional<Received> received = ReceiveAny(timeout);
    if (!received || received->type() != wire::Body::AttachChannelRequest) return received;
    Reply(*received, proto::ErrorMessage(received->request_id(),
                                         Status::Unavailable("the fake router has no channel")));
  }
}

std::optional<Received> FakeRouter::ReceiveAny(std::chrono::milliseconds timeout) {
  zmq::pollitem_t item{socket_.handle(), 0, ZMQ_POLLIN, 0};
  if (zmq::poll(&item, 1, timeout) == 0) return std::nullopt;
  std::vector<zmq::message_t> frames;
  do {
    frames.emplace_back();
    (void)socket_.recv(frames.back());
  } while (frames.back().more());
  if (frames.size() != 2) return std::nullopt;
  Received received;
  received.peer = frames[0].to_string();
  const auto* data = frames[1].data<uint8_t>();
  received.bytes.assign(data, data + frames[1].size());
  if (!proto::VerifyEnvelope(received.bytes.data(), received.bytes.size(), 1 << 26).ok()) {
    return std::nullopt;
  }
  return received;
}

void FakeRouter::Send(const std::string& peer, const std::vector<proto::Bytes>& frames) {
  socket_.send(zmq::buffer(peer), zmq::send_flags::sndmore);
  for (size_t i = 0; i < frames.size(); ++i) {
    socket_.send(zmq::buffer(frames[i]),
                 i + 1 < frames.size() ? zmq::send_flags::sndmore : zmq::send_flags::none);
  }
}

bool FakeRouter::AnswerHello(const std::array<uint8_t, 16>& boot_id, uint32_t max_chunks,
                             uint32_t pid) {
  auto hello = Receive();
  if (!hello || hello->type() != wire::Body::HelloRequest) return false;
  Reply(*hello, HelloReply(hello->request_id(), boot_id, proto::kProtocolVersion, max_chunks, pid));
  return true;
}

proto::Bytes HelloReply(uint64_t request_id, const std::array<uint8_t, 16>& boot_id,
                        uint32_t protocol_version, uint32_t max_chunks, uint32_t pid) {
  flatbuffers::FlatBufferBuilder fbb;
  const std::vector<uint8_t> boot(boot_id.begin(), boot_id.end());
  auto body = wire::CreateHelloReplyDirect(fbb, protocol_version, "fake-0.0", &boot, 256,
                                           max_chunks, 64 << 20, "host", 0, pid);
  return proto::Finish(fbb, request_id, wire::Body::HelloReply, body.Union());
}

proto::Bytes RegisterKVReply(uint64_t request_id, uint64_t registration_id, bool fenced) {
  flatbuffers::FlatBufferBuilder fbb;
  LayerGeometry g;
  g.num_blocks = 8;
  g.kv_count = 2;
  g.block_tokens = 16;
  g.num_heads = 1;
  g.head_bytes = 16;
  g.head_stride = 16;
  g.token_stride = 16;
  g.block_stride = 256;
  g.kv_stride = 2048;
  const std::vector<uint32_t> layers = {0};
  std::vector<flatbuffers::Offset<wire::GroupInfo>> groups = {
      wire::CreateGroupInfoDirect(fbb, proto::ToWire(fbb, g), &layers, 0, uint64_t{2} * 256 * 16)};
  const std::vector<uint8_t> fingerprint(32, 1), namespace_id(32, 2);
  auto body = wire::CreateRegisterKVReplyDirect(fbb, registration_id, 256, 8192, 16, &groups,
                                                &fingerprint, &namespace_id, fenced);
  return proto::Finish(fbb, request_id, wire::Body::RegisterKVReply, body.Union());
}

proto::Bytes StoreReply(uint64_t request_id,
                        const std::vector<std::pair<ChunkResult, uint32_t>>& outcomes) {
  flatbuffers::FlatBufferBuilder fbb;
  std::vector<flatbuffers::Offset<wire::ChunkOutcome>> chunks;
  for (const auto& [result, tokens] : outcomes) {
    chunks.push_back(
        wire::CreateChunkOutcomeDirect(fbb, wire::ChunkResult(uint8_t(result)), tokens));
  }
  auto body = wire::CreateStoreReplyDirect(fbb, &chunks);
  return proto::Finish(fbb, request_id, wire::Body::StoreReply, body.Union());
}

proto::Bytes PingReply(uint64_t request_id, uint64_t uptime_ms) {
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreatePingReply(fbb, uptime_ms);
  return proto::Finish(fbb, request_id, wire::Body::PingReply, body.Union());
}

size_t ChunkCount(const Received& store) {
  const auto* request = store.envelope().body_as_StoreRequest();
  return request && request->chunks() ? request->chunks()->size() : 0;
}

std::string FenceName(const Received& register_kv) {
  const auto* request = register_kv.envelope().body_as_RegisterKVRequest();
  return request && request->fence() ? request->fence()->str() : std::string();
}

namespace {

bool LockByte(int fd, int command, short type, off_t byte) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  return fcntl(fd, command, &lock) == 0;
}

}  // namespace

std::optional<DaemonFenceHold> DaemonFenceHold::Open(const std::string& name) {
  const int fd = shm_open(name.c_str(), O_RDONLY | O_CLOEXEC, 0);
  if (fd < 0) return std::nullopt;
  if (!LockByte(fd, F_SETLK, F_RDLCK, fence::kDaemonByte)) {
    close(fd);
    return std::nullopt;
  }
  return DaemonFenceHold(fd);
}

DaemonFenceHold::~DaemonFenceHold() {
  if (fd_ >= 0) close(fd_);
}

bool DaemonFenceHold::Hold(uint64_t request_id) {
  return LockByte(fd_, F_OFD_SETLK, F_RDLCK, fence::RequestByte(request_id));
}

}  // namespace kvstash::testing
