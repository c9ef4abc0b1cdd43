// Whatever a client names as shared memory (KV memory, a completion board, a
// copy fence, a shared-memory channel) is opened without waiting and checked
// for what it is: a FIFO, a symbolic link or an object under another
// process's lease is refused at once, with the name and what it is, while
// every other client is served and the daemon still stops on SIGTERM.
// Spoken over a raw DEALER: libkvstash never names such things itself.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <optional>
#include <string>
#include <thread>

#include <zmq.hpp>

#include "harness.h"
#include "kvstash/proto/codec.h"
#include "kvstash/shm_channel.h"
#include "raw_reply.h"

namespace kvstash::testing {
namespace {

// Not 5 s (the raw reply's limit): a frozen frontend must show as no reply.
constexpr auto kPingTimeout = std::chrono::milliseconds(3000);

// A name in /dev/shm made for one test, removed with it.
class ShmPath {
 public:
  explicit ShmPath(const std::string& tag)
      : name_("/kvstash-test-" + tag + "-" + std::to_string(getpid())) {
    unlink(path().c_str());
  }
  ~ShmPath() { unlink(path().c_str()); }
  const std::string& name() const { return name_; }
  std::string path() const { return "/dev/shm" + name_; }

 private:
  std::string name_;
};

// A FIFO in /dev/shm. A daemon that opened it read-only would wait there for
// a writer: the destructor opens the other end for a moment, so that such a
// daemon is let go before it is killed.
class ShmFifo : public ShmPath {
 public:
  explicit ShmFifo(const std::string& tag) : ShmPath(tag) {
    EXPECT_EQ(mkfifo(path().c_str(), 0600), 0) << path() << ": " << std::strerror(errno);
  }
  ~ShmFifo() {
    const int fd = open(path().c_str(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd >= 0) close(fd);
  }
};

class ClientNames : public RawWireTest {
 protected:
  // RegisterKV of the fixture's engine geometry; its memory is `kv_name`
  // (the engine's own object when empty), with an optional board and fence.
  proto::Bytes Register(const std::string& kv_name, const std::string& board_name,
                        const std::string& fence_name) {
    const RegisterOptions options = engine_->Registration("names-model");
    const HostShm& shm = std::get<HostShm>(options.allocations.front());
    flatbuffers::FlatBufferBuilder fbb;
    auto handle = wire::CreateHostShmHandleDirect(
        fbb, kv_name.empty() ? shm.name.c_str() : kv_name.c_str(), shm.size_bytes);
    std::vector<flatbuffers::Offset<wire::Allocation>> allocations{
        wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union())};
    std::vector<flatbuffers::Offset<wire::LayerDesc>> layers;
    for (const LayerDesc& layer : options.layers) {
      layers.push_back(wire::CreateLayerDesc(fbb, layer.allocation, layer.offset_bytes,
                                             proto::ToWire(fbb, layer.geometry)));
    }
    flatbuffers::Offset<wire::HostShmHandle> board;
    if (!board_name.empty()) {
      board = wire::CreateHostShmHandleDirect(fbb, board_name.c_str(), 16 * 64);
    }
    auto body =
        wire::CreateRegisterKVRequest(fbb, fbb.CreateString("names-model"), fbb.CreateString(""), 0,
                                      1, fbb.CreateVector(allocations), fbb.CreateVector(layers),
                                      board, fence_name.empty() ? 0 : fbb.CreateString(fence_name));
    return proto::Finish(fbb, 77, wire::Body::RegisterKVRequest, body.Union());
  }
  proto::Bytes Attach(const std::string& name) {
    flatbuffers::FlatBufferBuilder fbb;
    constexpr uint64_t kRing = channel::kMinRingBytes;
    auto body = wire::CreateAttachChannelRequestDirect(fbb, name.c_str(), kRing, kRing);
    return proto::Finish(fbb, 78, wire::Body::AttachChannelRequest, body.Union());
  }
  // Another client, whose requests give up long before the raw reply's 5 s.
  std::unique_ptr<Client> Other() {
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = kPingTimeout;
    auto client = Client::Connect(options);
    EXPECT_TRUE(client.ok()) << client.status().ToString();
    return client.ok() ? std::move(*client) : nullptr;
  }
  // SIGTERM; whether the daemon exited (cleanly) within 10 s.
  bool StopsOnSigterm() {
    daemon_->Signal(SIGTERM);
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!daemon_->exited() && std::chrono::steady_clock::now() < until) {
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    if (!daemon_->exited()) return false;
    EXPECT_EQ(daemon_->Wait(), 0);
    return true;
  }
};

TEST_F(ClientNames, AFifoNamedAsCopyFenceIsRefusedAtOnceWhileOthersAreServed) {
  ShmFifo fifo("fence-fifo");
  std::unique_ptr<Client> other = Other();
  ASSERT_NE(other, nullptr);
  SendRaw(Register("", "", fifo.name()));
  // Another client is answered meanwhile.
  auto ping = other->Ping().get();
  EXPECT_TRUE(ping.ok()) << ping.status().ToString();
  auto [code, message] = ReadRawReply(dealer_);
  EXPECT_EQ(code, wire::ErrorCode::InvalidArgument) << message;
  EXPECT_NE(message.find("copy fence " + fifo.name() + " is a FIFO"), std::string::npos) << message;
  // The fixture's client, and a registration with a real fence, still work.
  auto registered = client_->RegisterKV(engine_->Registration("after-fifo")).get();
  ASSERT_TRUE(registered.ok()) << registered.status().ToString();
  EXPECT_TRUE(StopsOnSigterm()) << "kvstashd did not stop on SIGTERM";
}

TEST_F(ClientNames, AFifoIsRefusedAsKvMemoryBoardOrChannel) {
  ShmFifo fifo("fifo");
  std::unique_ptr<Client> other = Other();
  ASSERT_NE(other, nullptr);
  struct Case {
    proto::Bytes request;
    std::string what;
  };
  const Case cases[] = {{Register(fifo.name(), "", ""), "shared memory"},
                        {Register("", fifo.name(), ""), "completion board"},
                        {Attach(fifo.name()), "channel"}};
  for (const Case& c : cases) {
    SendRaw(c.request);
    auto [code, message] = ReadRawReply(dealer_);
    EXPECT_EQ(code, wire::ErrorCode::InvalidArgument) << c.what << ": " << message;
    EXPECT_NE(message.find(c.what + " " + fifo.name() + " is a FIFO"), std::string::npos)
        << message;
    auto ping = other->Ping().get();
    EXPECT_TRUE(ping.ok()) << ping.status().ToString();
  }
  EXPECT_TRUE(StopsOnSigterm()) << "kvstashd did not stop on SIGTERM";
}

TEST_F(ClientNames, ASymbolicLinkIsRefusedAsKvMemoryOrCopyFence) {
  // To the engine's own, valid, memory: only the link is wrong.
  const HostShm shm = std::get<HostShm>(engine_->Registration("m").allocations[0]);
  ShmPath link("link");
  ASSERT_EQ(symlink(("/dev/shm" + shm.name).c_str(), link.path().c_str()), 0)
      << std::strerror(errno);
  SendRaw(Register(link.name(), "", ""));
  auto [kv_code, kv_message] = ReadRawReply(dealer_);
  EXPECT_EQ(kv_code, wire::ErrorCode::InvalidArgument) << kv_message;
  EXPECT_NE(kv_message.find("shared memory " + link.name() + " is a symbolic link"),
            std::string::npos)
      << kv_message;
  SendRaw(Register("", "", link.name()));
  auto [fence_code, fence_message] = ReadRawReply(dealer_);
  EXPECT_EQ(fence_code, wire::ErrorCode::InvalidArgument) << fence_message;
  EXPECT_NE(fence_message.find("copy fence " + link.name() + " is a symbolic link"),
            std::string::npos)
      << fence_message;
}

TEST_F(ClientNames, KvMemoryUnderAnotherProcesssLeaseIsRefusedWithoutWaitingForIt) {
  // An object of the engine's size under a read lease held here: opening it
  // for writing breaks the lease, which waits for its holder to let go (or
  // /proc/sys/fs/lease-break-time, 45 s by default). This process never
  // does: it ignores the lease-break signal while the test runs.
  const HostShm shm = std::get<HostShm>(engine_->Registration("m").allocations[0]);
  ShmPath leased("leased");
  {
    const int fd = shm_open(leased.name().c_str(), O_CREAT | O_EXCL | O_RDWR | O_CLOEXEC, 0600);
    ASSERT_GE(fd, 0) << std::strerror(errno);
    ASSERT_EQ(ftruncate(fd, off_t(shm.size_bytes)), 0);
    close(fd);
  }
  struct sigaction ignore {};
  struct sigaction previous {};
  ignore.sa_handler = SIG_IGN;
  ASSERT_EQ(sigaction(SIGIO, &ignore, &previous), 0);
  const int lease_fd = shm_open(leased.name().c_str(), O_RDONLY | O_CLOEXEC, 0);
  ASSERT_GE(lease_fd, 0) << std::strerror(errno);
  if (fcntl(lease_fd, F_SETLEASE, F_RDLCK) != 0) {
    const int error = errno;
    close(lease_fd);
    sigaction(SIGIO, &previous, nullptr);
    GTEST_SKIP() << "no lease on " << leased.path() << ": " << std::strerror(error);
  }
  std::unique_ptr<Client> other = Other();
  ASSERT_NE(other, nullptr);
  SendRaw(Register(leased.name(), "", ""));
  auto ping = other->Ping().get();
  EXPECT_TRUE(ping.ok()) << ping.status().ToString();
  auto [code, message] = ReadRawReply(dealer_);
  EXPECT_EQ(code, wire::ErrorCode::Unavailable) << message;
  EXPECT_NE(message.find("shared memory " + leased.name() + " is leased"), std::string::npos)
      << message;
  EXPECT_TRUE(StopsOnSigterm()) << "kvstashd did not stop on SIGTERM";
  (void)fcntl(lease_fd, F_SETLEASE, F_UNLCK);
  close(lease_fd);
  sigaction(SIGIO, &previous, nullptr);
}

}  // namespace
}  // namespace kvstash::testing
