// The channels' doorbell (docs/protocol.md "Shared-memory channel"): a
// daemon asleep past its spin window gets a client's requests through the
// ring, woken by one datagram on the doorbell socket beside its ipc socket,
// not over ZeroMQ; the doorbell is one file for all channels, gone with the
// daemon; a client ringing without end does not stop anyone being served.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <fstream>
#include <set>
#include <thread>

#include "eventually.h"
#include "harness.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;

std::set<std::string> Entries(const std::string& dir) {
  std::set<std::string> names;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* entry = readdir(d)) {
      const std::string name = entry->d_name;
      if (name != "." && name != "..") names.insert(name);
    }
    closedir(d);
  }
  return names;
}

std::string Folder(const std::string& path) { return path.substr(0, path.rfind('/')); }
std::string Base(const std::string& path) { return path.substr(path.rfind('/') + 1); }

bool IsSocket(const std::string& path) {
  struct stat st {};
  return lstat(path.c_str(), &st) == 0 && S_ISSOCK(st.st_mode);
}

class Doorbell : public DaemonTest {
 protected:
  // A killed engine's registration keeps its copy fence (one descriptor)
  // until the daemon takes the engine for dead: soon, here.
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--peer-timeout-ms", "2000"});
    return args;
  }
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(Eventually([&] { return client_->server_info().shm_channel; }))
        << "the fixture's client attached no channel";
  }
  std::string DoorbellPath() const { return daemon_->socket_path() + ".doorbell"; }
  // What a running daemon keeps beside its socket: the doorbell and the
  // lock that makes it the path's one owner.
  std::set<std::string> Own() const {
    return {Base(daemon_->socket_path()), Base(DoorbellPath()),
            Base(daemon_->socket_path() + ".lock")};
  }

  // Pings with `pause` between them (the daemon sleeps by then); returns the
  // median round trip in ms.
  double PingSporadically(Client& client, int rounds, milliseconds pause) {
    std::vector<double> ms;
    for (int round = 0; round < rounds; ++round) {
      std::this_thread::sleep_for(pause);
      const auto start = std::chrono::steady_clock::now();
      auto pinged = client.Ping().get();
      EXPECT_TRUE(pinged.ok()) << pinged.status().ToString();
      ms.push_back(
          std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
              .count());
    }
    std::sort(ms.begin(), ms.end());
    return ms[ms.size() / 2];
  }
};

TEST_F(Doorbell, ASleepingDaemonGetsRequestsThroughTheRingWokenByTheDoorbell) {
  const uint64_t requests_before = Counter("requests");
  const uint64_t ring_before = Counter("channel_requests");
  const uint64_t bells_before = Counter("channel_doorbells");
  constexpr int kRounds = 20;
  const double median = PingSporadically(*client_, kRounds, milliseconds(20));
  const uint64_t requests = Counter("requests") - requests_before;
  const uint64_t ring = Counter("channel_requests") - ring_before;
  const uint64_t bells = Counter("channel_doorbells") - bells_before;
  // The pings, the Stats calls counting, any keep-alive: all through the ring.
  EXPECT_GE(ring, uint64_t(kRounds));
  EXPECT_EQ(requests, ring) << requests - ring << " requests came over ZeroMQ";
  // 20 ms past a 50 us spin window: every ping finds the daemon asleep (a
  // loaded machine may keep it busy now and then).
  EXPECT_GE(bells, uint64_t(kRounds / 2));
  // A missed wake-up waits out the daemon's 100 ms poll.
  EXPECT_LT(median, 50.0);
  EXPECT_TRUE(client_->server_info().shm_channel);
}

TEST_F(Doorbell, IsOneSocketBesideTheIpcSocketAndGoesWithTheDaemon) {
  const std::string dir = Folder(daemon_->socket_path());
  ASSERT_TRUE(IsSocket(DoorbellPath())) << DoorbellPath();
  EXPECT_EQ(Entries(dir), Own());
  // Many clients, attached and closed, one killed: still one doorbell, no
  // descriptor left behind.
  const size_t fds_before = OpenFds(daemon_->pid());
  for (int i = 0; i < 3; ++i) {
    std::unique_ptr<Client> brief = Connect();
    ASSERT_NE(brief, nullptr);
    ASSERT_TRUE(Eventually([&] { return brief->server_info().shm_channel; }));
    ASSERT_TRUE(brief->Ping().get().ok());
  }
  const pid_t victim = StartStoringEngine(daemon_->socket());
  std::this_thread::sleep_for(milliseconds(300));
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  EXPECT_TRUE(Eventually([&] { return OpenFds(daemon_->pid()) == fds_before; }))
      << OpenFds(daemon_->pid()) << " descriptors open, " << fds_before << " before";
  EXPECT_EQ(Entries(dir), Own());
  EXPECT_TRUE(client_->Ping().get().ok());
  ASSERT_EQ(daemon_->Stop(), 0);
  EXPECT_EQ(Entries(dir), std::set<std::string>{}) << "left in the socket's folder";
}

TEST_F(Doorbell, ADaemonKilledLeavesOneItsSuccessorReplaces) {
  daemon_->Signal(SIGKILL);
  daemon_->Wait();
  ASSERT_TRUE(IsSocket(DoorbellPath()));
  ASSERT_TRUE(daemon_->Restart().ok());
  ASSERT_TRUE(IsSocket(DoorbellPath()));
  ASSERT_TRUE(Eventually([&] { return client_->server_info().shm_channel; }, milliseconds(15000)));
  const uint64_t bells_before = Counter("channel_doorbells");
  EXPECT_LT(PingSporadically(*client_, 7, milliseconds(20)), 50.0);
  EXPECT_GE(Counter("channel_doorbells") - bells_before, 3u)
      << "the client rings the new daemon's doorbell";
}

TEST_F(Doorbell, AClientRingingWithoutEndDoesNotStopOthersBeingServed) {
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  ASSERT_GE(fd, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  const std::string path = DoorbellPath();
  std::memcpy(address.sun_path, path.data(), path.size());
  ASSERT_EQ(connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)), 0)
      << std::strerror(errno);
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> rung{0};
  std::thread flood([&] {
    char bytes[512] = {};
    while (!stop.load()) {
      // Large and small datagrams, as fast as the queue takes them.
      if (send(fd, bytes, 1 + rung.load() % sizeof(bytes), MSG_DONTWAIT | MSG_NOSIGNAL) > 0) {
        rung.fetch_add(1);
      } else {
        sched_yield();
      }
    }
  });
  std::unique_ptr<Client> other = Connect();
  ASSERT_NE(other, nullptr);
  ASSERT_TRUE(Eventually([&] { return other->server_info().shm_channel; }));
  const double median = PingSporadically(*other, 20, milliseconds(5));
  const double mine = PingSporadically(*client_, 10, milliseconds(5));
  stop = true;
  flood.join();
  close(fd);
  EXPECT_GT(rung.load(), 100u) << "the flood did not reach the doorbell";
  EXPECT_LT(median, 50.0);
  EXPECT_LT(mine, 50.0);
  EXPECT_TRUE(daemon_->running());
}

TEST_F(Doorbell, SomethingElseAtItsPathIsNeitherFollowedNorRemoved) {
  ASSERT_EQ(daemon_->Stop(), 0);
  const std::string target = Folder(daemon_->socket_path()) + "/target";
  { std::ofstream(target) << "precious"; }
  ASSERT_EQ(symlink(target.c_str(), DoorbellPath().c_str()), 0) << std::strerror(errno);
  ASSERT_TRUE(daemon_->Restart().ok());
  ASSERT_TRUE(Eventually([&] { return client_->server_info().shm_channel; }, milliseconds(15000)));
  // Without a doorbell the channel still serves, woken over ZeroMQ.
  const uint64_t bells_before = Counter("channel_doorbells");
  EXPECT_LT(PingSporadically(*client_, 5, milliseconds(20)), 50.0);
  EXPECT_EQ(Counter("channel_doorbells"), bells_before);
  struct stat st {};
  ASSERT_EQ(lstat(DoorbellPath().c_str(), &st), 0);
  EXPECT_TRUE(S_ISLNK(st.st_mode)) << "the symlink was replaced";
  std::string content;
  std::getline(std::ifstream(target), content);
  EXPECT_EQ(content, "precious");
  ASSERT_EQ(daemon_->Stop(), 0);
  EXPECT_EQ(lstat(DoorbellPath().c_str(), &st), 0) << "kvstashd removed what was not its own";
  unlink(DoorbellPath().c_str());
  unlink(target.c_str());
}

class DoorbellOff : public DaemonWithoutChannelTest {};

TEST_F(DoorbellOff, ADaemonWithoutChannelsHasNoDoorbell) {
  EXPECT_FALSE(client_->server_info().shm_channel);
  const std::string dir = Folder(daemon_->socket_path());
  EXPECT_EQ(Entries(dir), (std::set<std::string>{Base(daemon_->socket_path()),
                                                 Base(daemon_->socket_path() + ".lock")}));
  EXPECT_TRUE(client_->Ping().get().ok());
  EXPECT_EQ(Counter("channel_requests"), 0u);
}

}  // namespace
}  // namespace kvstash::testing
