// What one peer may make kvstashd hold is bounded by who the peer is (its
// process and its user), not by its connections, which cost nothing to
// open: registrations and shared-memory channels per process, mappings and
// channel bytes per user. A channel lives as long as its connection; an
// idle one is not polled, and holds no memory of the daemon's own.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <thread>

#include <zmq.hpp>

#include "eventually.h"
#include "harness.h"
#include "kvstash/shm_channel.h"
#include "raw_reply.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;

// Anonymous memory of a process in KiB (RssAnon: not the shared segments
// it maps, which are their creator's).
uint64_t AnonymousKiB(pid_t pid) {
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);) {
    if (line.rfind("RssAnon:", 0) == 0) return std::stoull(line.substr(8));
  }
  return 0;
}

// A channel attached by hand over a raw DEALER, as a client that never
// marks its segment closed would: 4 KiB rings, a valid header.
class RawChannel {
 public:
  RawChannel(zmq::context_t& context, const std::string& endpoint, int index)
      : dealer_(context, zmq::socket_type::dealer) {
    name_ = "/kvstash-test-raw-" + std::to_string(getpid()) + "-" + std::to_string(index);
    constexpr uint64_t kRing = channel::kMinRingBytes;
    const uint64_t bytes = channel::SegmentBytes(kRing, kRing);
    const int fd = shm_open(name_.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
    EXPECT_GE(fd, 0) << std::strerror(errno);
    EXPECT_EQ(ftruncate(fd, off_t(bytes)), 0);
    void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    EXPECT_NE(base, MAP_FAILED);
    const channel::SegmentHeader header{channel::kMagic, channel::kVersion, kRing, kRing, 0, 0};
    std::memcpy(base, &header, sizeof(header));
    base_ = static_cast<uint8_t*>(base);
    bytes_ = bytes;
    requests_ = channel::RequestRing(base_, kRing);
    dealer_.set(zmq::sockopt::linger, 0);
    dealer_.set(zmq::sockopt::rcvtimeo, 5000);
    dealer_.connect(endpoint);
    flatbuffers::FlatBufferBuilder fbb(256);
    auto body = wire::CreateAttachChannelRequestDirect(fbb, name_.c_str(), kRing, kRing);
    const proto::Bytes request =
        proto::Finish(fbb, 1, wire::Body::AttachChannelRequest, body.Union());
    dealer_.send(zmq::buffer(request.data(), request.size()));
    reply_ = ReadRawReply(dealer_);
  }
  ~RawChannel() {
    munmap(base_, bytes_);
    shm_unlink(name_.c_str());
  }
  // The daemon's word in the request ring: 1 while it polls this ring.
  uint32_t RequestAwakeWord() const { return channel::LoadWord32(requests_.awake_word()); }
  bool attached() const { return reply_.first == wire::ErrorCode::Ok; }
  const std::string& error() const { return reply_.second; }
  // The connection goes; the process, and the segment, stay.
  void CloseConnection() { dealer_.close(); }

 private:
  zmq::socket_t dealer_;
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  channel::Ring requests_;
  std::pair<wire::ErrorCode, std::string> reply_;
};

class PeerBudgets : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--max-registrations-per-process", "3", "--max-channels-per-process",
                             "3", "--peer-timeout-ms", "800"});
    return args;
  }
};

TEST_F(PeerBudgets, RegistrationsAreBoundedPerProcessNotPerConnection) {
  // The fixture's connection holds one; each fresh connection adds one.
  std::vector<std::unique_ptr<Client>> clients;
  std::vector<uint64_t> ids;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    auto reg = clients.back()->RegisterKV(engine_->Registration("m" + std::to_string(i))).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    ids.push_back(reg->id);
  }
  // A new connection of the same process finds the process's budget spent.
  std::unique_ptr<Client> fresh = Connect();
  ASSERT_NE(fresh, nullptr);
  auto refused = fresh->RegisterKV(engine_->Registration("fresh")).get();
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.status().code(), StatusCode::kResourceExhausted);
  EXPECT_NE(refused.status().message().find("process " + std::to_string(getpid())),
            std::string::npos)
      << refused.status().ToString();
  EXPECT_NE(refused.status().message().find("--max-registrations-per-process"), std::string::npos)
      << refused.status().ToString();
  EXPECT_GE(Counter("peer_budget_refusals"), 1u);
  // Another process has a budget of its own.
  ProcessResult other =
      RunBinary("kvstash_test_tenant", {"--socket", daemon_->socket(), "store-own:other"});
  EXPECT_NE(other.output.find("store-own Ok 2"), std::string::npos) << other.output;
  // Everyone is still served, Describe and Stats included.
  EXPECT_TRUE(client_->Describe().get().ok());
  EXPECT_TRUE(fresh->Stats().get().ok());
  // A registration given back makes room for the process again.
  ASSERT_TRUE(clients[0]->UnregisterKV(ids[0]).get().ok());
  EXPECT_TRUE(fresh->RegisterKV(engine_->Registration("fresh")).get().ok());
}

TEST_F(PeerBudgets, ChannelsAreBoundedPerProcessAndFreedWithTheirClient) {
  // The fixture's client has one channel; two more connections get theirs.
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 2; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(Eventually([&] { return clients.back()->server_info().shm_channel; }));
  }
  // The fourth uses the socket, and is served.
  std::unique_ptr<Client> fourth = Connect();
  ASSERT_NE(fourth, nullptr);
  std::this_thread::sleep_for(milliseconds(300));  // its attach was answered by now
  EXPECT_FALSE(fourth->server_info().shm_channel);
  EXPECT_TRUE(fourth->Ping().get().ok());
  // A client that goes gives its channel back.
  clients.pop_back();
  ASSERT_TRUE(Eventually([&] {
    std::unique_ptr<Client> next = Connect();
    return next && Eventually([&] { return next->server_info().shm_channel; }, milliseconds(500));
  }));
}

TEST_F(PeerBudgets, AChannelEndsWithItsConnectionWhileItsProcessLives) {
  // Only the fixture's channel is left: the start-up probe's client, gone,
  // gives its channel back within a few sweeps.
  ASSERT_TRUE(
      Eventually([&] { return Counter("channels_attached") - Counter("channels_detached") == 1; },
                 milliseconds(3000)));
  const uint64_t attached_before = Counter("channels_attached");
  const uint64_t detached_before = Counter("channels_detached");
  zmq::context_t context(1);
  std::vector<std::unique_ptr<RawChannel>> raw;
  for (int i = 0; i < 2; ++i) {
    raw.push_back(std::make_unique<RawChannel>(context, daemon_->socket(), i));
    ASSERT_TRUE(raw.back()->attached()) << raw.back()->error();
  }
  EXPECT_EQ(Counter("channels_attached") - attached_before, 2u);
  for (auto& r : raw) r->CloseConnection();
  // Silent past --peer-timeout-ms (800 ms): both detached, although this
  // process lives and never marked the segments closed.
  EXPECT_TRUE(Eventually([&] { return Counter("channels_detached") - detached_before == 2; },
                         milliseconds(8000)))
      << Counter("channels_detached") - detached_before << " detached";
  // Their places are free again: the process attaches two more.
  for (int i = 2; i < 4; ++i) {
    raw.push_back(std::make_unique<RawChannel>(context, daemon_->socket(), i));
    EXPECT_TRUE(raw.back()->attached()) << raw.back()->error();
  }
  // The live client's channel, which pings, stayed.
  EXPECT_TRUE(client_->server_info().shm_channel);
  EXPECT_TRUE(client_->Ping().get().ok());
}

class IdleChannels : public DaemonTest {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--max-channels-per-process", "64"});
    return args;
  }
};

TEST_F(IdleChannels, AreNotPolledWhileOthersWork) {
  zmq::context_t context(1);
  std::vector<std::unique_ptr<RawChannel>> idle;
  for (int i = 0; i < 16; ++i) {
    idle.push_back(std::make_unique<RawChannel>(context, daemon_->socket(), i));
    ASSERT_TRUE(idle.back()->attached()) << idle.back()->error();
  }
  std::this_thread::sleep_for(milliseconds(200));  // past the idle window
  // The daemon spins while it serves the pinging client; it looks at the
  // rings it polls with their awake word at 1. The idle ones it leaves
  // alone (their clients would ring the doorbell to be heard).
  std::atomic<bool> stop{false};
  std::atomic<int> seen_awake{0};
  std::thread watch([&] {
    while (!stop.load()) {
      for (const auto& ch : idle) {
        if (ch->RequestAwakeWord() != 0) seen_awake.fetch_add(1);
      }
    }
  });
  for (int i = 0; i < 300; ++i) ASSERT_TRUE(client_->Ping().get().ok());
  stop = true;
  watch.join();
  EXPECT_EQ(seen_awake.load(), 0) << "idle rings were polled while another client worked";
  EXPECT_TRUE(client_->server_info().shm_channel);
}

TEST_F(IdleChannels, HoldNoMemoryOfTheDaemonsOwn) {
  // Largest rings: 64 MiB each way.
  setenv("KVSTASH_SHM_CHANNEL_RING_BYTES", std::to_string(channel::kMaxRingBytes).c_str(), 1);
  const uint64_t before_kib = AnonymousKiB(daemon_->pid());
  std::vector<std::unique_ptr<Client>> clients;
  for (int i = 0; i < 8; ++i) {
    clients.push_back(Connect());
    ASSERT_NE(clients.back(), nullptr);
    ASSERT_TRUE(Eventually([&] { return clients.back()->server_info().shm_channel; }));
    ASSERT_TRUE(clients.back()->Ping().get().ok());
  }
  unsetenv("KVSTASH_SHM_CHANNEL_RING_BYTES");
  const uint64_t grown_mib = (AnonymousKiB(daemon_->pid()) - before_kib) / 1024;
  // One frame buffer for all channels (16 MiB, a quarter of the largest
  // ring), not one per channel (8 x 16 MiB).
  EXPECT_LT(grown_mib, 40u) << "kvstashd's anonymous memory grew by " << grown_mib << " MiB";
}

}  // namespace
}  // namespace kvstash::testing
