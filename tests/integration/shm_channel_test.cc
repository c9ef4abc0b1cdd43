// The shared-memory channel (docs/protocol.md "Shared-memory channel"): a
// client on the ipc socket attaches rings in shared memory by default and
// its requests and replies travel through them; a client that breaks its
// rings loses its channel (and nothing else, nor anyone else anything); a
// dead client's channel is unmapped; a restarted daemon gets a fresh one; a
// full ring falls back to the socket; a sleeping daemon is woken.
#include <dirent.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <sstream>
#include <thread>

#include "eventually.h"
#include "harness.h"
#include "kvstash/shm_channel.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;
constexpr uint64_t kSeed = 0x5c4a;
constexpr char kSegmentPrefix[] = "/dev/shm/kvstash-channel-";

// Lines of /proc/<pid>/maps that map a channel segment.
std::vector<std::string> ChannelMappings(const std::string& pid) {
  std::ifstream maps("/proc/" + pid + "/maps");
  std::vector<std::string> found;
  for (std::string line; std::getline(maps, line);) {
    if (line.find(kSegmentPrefix) != std::string::npos) found.push_back(line);
  }
  return found;
}

// Names left in /dev/shm by this process's channels (unlinked once
// attached; other tests' processes run beside this one).
size_t ChannelNames() {
  size_t count = 0;
  const std::string mine = "kvstash-channel-" + std::to_string(getpid()) + "-";
  if (DIR* dir = opendir("/dev/shm")) {
    while (dirent* entry = readdir(dir)) {
      if (std::string(entry->d_name).rfind(mine, 0) == 0) ++count;
    }
    closedir(dir);
  }
  return count;
}

// This process's mapping of its (only) channel segment.
uint8_t* OwnSegment() {
  const std::vector<std::string> lines = ChannelMappings("self");
  if (lines.size() != 1) return nullptr;
  return reinterpret_cast<uint8_t*>(
      std::stoull(lines[0].substr(0, lines[0].find('-')), nullptr, 16));
}

class ShmChannel : public DaemonTest {
 protected:
  void SetUp() override {
    DaemonTest::SetUp();
    if (HasFatalFailure()) return;
    ASSERT_TRUE(Eventually([&] { return client_->server_info().shm_channel; }))
        << "the fixture's client attached no channel";
  }
  void ExpectStoredBytesIntact(Client& client, const RegisteredKv& reg,
                               const std::vector<int32_t>& tokens) {
    engine_->Poison(Blocks(200, 8));
    auto chunks = PromptChunks(reg, tokens.data(), tokens.size(), Blocks(200, 8).data(), 8);
    ASSERT_TRUE(chunks.ok());
    auto got = client.Retrieve(reg.id, *chunks).get();
    ASSERT_TRUE(got.ok()) << got.status().ToString();
    for (const ChunkOutcome& o : *got) EXPECT_EQ(o.result, ChunkResult::kRetrieved);
    EXPECT_EQ(engine_->CountMismatches(kSeed, tokens, Blocks(200, 8), 0, tokens.size()), 0u);
  }
};

TEST_F(ShmChannel, IsAttachedByDefaultAndMappedOnceOnEachSide) {
  // (DaemonProcess's own readiness ping may still be mapped for a tick.)
  EXPECT_TRUE(
      Eventually([&] { return ChannelMappings(std::to_string(daemon_->pid())).size() == 1; }));
  EXPECT_EQ(ChannelMappings("self").size(), 1u);
  EXPECT_EQ(ChannelNames(), 0u) << "the name outlived the attach";
  const auto tokens = PromptTokens(1, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(kSeed, tokens, Blocks(0, 8))) {
    EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  }
  ExpectStoredBytesIntact(*client_, reg_, tokens);
}

TEST_F(ShmChannel, ATurnedOffClientAttachesNone) {
  ClientOptions options;
  options.socket = daemon_->socket();
  options.shm_channel = false;
  auto plain = Client::Connect(options);
  ASSERT_TRUE(plain.ok()) << plain.status().ToString();
  for (int i = 0; i < 20; ++i) ASSERT_TRUE((*plain)->Ping().get().ok());
  EXPECT_FALSE((*plain)->server_info().shm_channel);
  EXPECT_TRUE(Eventually([&] {
    return ChannelMappings(std::to_string(daemon_->pid())).size() == 1;
  })) << "only the fixture's client has a channel";
}

TEST_F(ShmChannel, ManyThreadsOfMixedRequestsEachGetTheirOwnReply) {
  constexpr int kThreads = 8;
  std::vector<std::vector<int32_t>> prompts;
  for (int t = 0; t < kThreads; ++t) {
    prompts.push_back(PromptTokens(100 + t, 64 * (t % 4 + 1), 0));
    FillAndStore(kSeed + t, prompts[t], Blocks(16 * t, 4 * (t % 4 + 1)));
  }
  std::atomic<int> wrong{0}, done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      const auto keys = ChunkKeys(reg_, prompts[t].data(), prompts[t].size());
      const auto blocks = Blocks(16 * t, 4 * (t % 4 + 1));
      auto chunks =
          PromptChunks(reg_, prompts[t].data(), prompts[t].size(), blocks.data(), blocks.size());
      for (int i = 0; i < 100; ++i) {
        // Several in flight at once, of every kind, answered in any order.
        auto lookup = client_->Lookup(reg_.id, keys);
        auto ping = client_->Ping();
        auto again = client_->Retrieve(reg_.id, *chunks);
        auto stats = i % 10 == 0 ? client_->Stats() : decltype(client_->Stats())();
        auto found = lookup.get();
        if (!found.ok() || found->hit_chunks != uint32_t(t % 4 + 1)) ++wrong;
        if (found.ok() && !client_->Release(found->lease_id).get().ok()) ++wrong;
        if (!ping.get().ok()) ++wrong;
        auto got = again.get();
        if (!got.ok() || got->size() != size_t(t % 4 + 1) ||
            got->back().result != ChunkResult::kRetrieved) {
          ++wrong;
        }
        if (stats.valid() && !stats.get().ok()) ++wrong;
        ++done;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(done.load(), kThreads * 100);
  EXPECT_TRUE(client_->server_info().shm_channel);
  EXPECT_EQ(engine_->CountMismatches(kSeed + 1, prompts[1], Blocks(16, 8), 0, prompts[1].size()),
            0u);
}

TEST_F(ShmChannel, ASleepingDaemonIsWokenByTheNextRequest) {
  std::vector<double> ms;
  for (int round = 0; round < 7; ++round) {
    // Past every spin window: both sides sleep.
    std::this_thread::sleep_for(milliseconds(150));
    const auto start = std::chrono::steady_clock::now();
    auto pinged = client_->Ping().get();
    ASSERT_TRUE(pinged.ok()) << pinged.status().ToString();
    ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start)
                     .count());
  }
  // A missed wake-up waits out the daemon's 100 ms poll every time; a busy
  // machine delays a round now and then: judge the median.
  std::sort(ms.begin(), ms.end());
  EXPECT_LT(ms[ms.size() / 2], 50.0) << "slowest " << ms.back() << " ms";
  EXPECT_TRUE(client_->server_info().shm_channel);
}

TEST_F(ShmChannel, AClientThatBreaksItsRingLosesItsChannelOnly) {
  const auto tokens = PromptTokens(7, 128, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 8));
  // Another client, over the socket only (so that this process maps one
  // segment: the scribbler's).
  ClientOptions plain;
  plain.socket = daemon_->socket();
  plain.shm_channel = false;
  auto other = Client::Connect(plain);
  ASSERT_TRUE(other.ok()) << other.status().ToString();
  uint8_t* base = OwnSegment();
  ASSERT_NE(base, nullptr);
  const uint64_t ring = channel::kDefaultRingBytes;
  channel::Ring requests = channel::RequestRing(base, ring);
  // A frame header whose check word is wrong, published past the client's
  // last frame: the daemon must refuse it, not read it.
  const uint64_t tail = channel::LoadWord64(requests.tail_word());
  const uint32_t bad[2] = {100, 12345};
  requests.CopyIn(tail, bad, sizeof(bad));
  channel::StoreWord64(requests.tail_word(), tail + 8);
  ASSERT_TRUE(Eventually([&] { return !client_->server_info().shm_channel; }))
      << "the daemon did not close a channel with a broken frame";
  EXPECT_TRUE(Eventually([&] { return ChannelMappings(std::to_string(daemon_->pid())).empty(); }));
  // This client goes on over the socket, the other as before; a new one
  // gets a channel as before.
  EXPECT_TRUE(client_->Ping().get().ok());
  EXPECT_TRUE((*other)->Ping().get().ok());
  ExpectStoredBytesIntact(*client_, reg_, tokens);
  std::unique_ptr<Client> fresh = Connect();
  ASSERT_NE(fresh, nullptr);
  EXPECT_TRUE(Eventually([&] { return fresh->server_info().shm_channel; }));
  EXPECT_TRUE(fresh->Ping().get().ok());
}

TEST_F(ShmChannel, ImpossiblePositionsAndRandomScribblesNeverHurtTheDaemon) {
  const auto tokens = PromptTokens(9, 128, 0);
  FillAndStore(kSeed, tokens, Blocks(0, 8));
  uint8_t* base = OwnSegment();
  ASSERT_NE(base, nullptr);
  channel::Ring requests = channel::RequestRing(base, channel::kDefaultRingBytes);
  // A tail more than a ring ahead of the head.
  channel::StoreWord64(requests.tail_word(),
                       channel::LoadWord64(requests.head_word()) + 3 * channel::kDefaultRingBytes);
  ASSERT_TRUE(Eventually([&] { return !client_->server_info().shm_channel; }));
  EXPECT_TRUE(client_->Ping().get().ok());

  // A second client scribbles random bytes over its whole segment while it
  // sends requests (they may fail: it broke its own channel); the daemon
  // serves this client throughout.
  {
    std::unique_ptr<Client> vandal = Connect();
    ASSERT_NE(vandal, nullptr);
    ASSERT_TRUE(Eventually([&] { return vandal->server_info().shm_channel; }));
    uint8_t* own = OwnSegment();  // the fixture's is unmapped: this is the vandal's
    ASSERT_NE(own, nullptr);
    const uint64_t bytes =
        channel::SegmentBytes(channel::kDefaultRingBytes, channel::kDefaultRingBytes);
    // The scribbler's own mapping of the same pages (mremap of a shared
    // mapping with old size 0 duplicates it): the client unmaps its view
    // once the daemon closes the channel, the scribbler keeps writing.
    void* dup = mremap(own, 0, bytes, MREMAP_MAYMOVE);
    ASSERT_NE(dup, MAP_FAILED) << std::strerror(errno);
    uint8_t* segment = static_cast<uint8_t*>(dup);
    std::atomic<bool> stop{false};
    std::thread scribbler([&] {
      std::mt19937_64 random(42);
      while (!stop.load()) {
        for (int i = 0; i < 64; ++i) {
          const uint64_t at = random() % (bytes / 8) * 8;
          if (at >= 4 && at < 8) continue;
          __atomic_store_n(reinterpret_cast<uint64_t*>(segment + at), random(), __ATOMIC_RELAXED);
        }
        // And the words that matter most.
        __atomic_store_n(reinterpret_cast<uint64_t*>(segment + channel::kRequestControlOffset +
                                                     channel::kTailOffset),
                         random() % 64 * 8, __ATOMIC_RELAXED);
        std::this_thread::yield();
      }
    });
    for (int i = 0; i < 200; ++i) {
      auto vandal_ping = vandal->Ping();
      auto own = client_->Ping().get();
      ASSERT_TRUE(own.ok()) << own.status().ToString();
      (void)vandal_ping.get();  // anything but a hang
    }
    stop = true;
    scribbler.join();
    munmap(segment, bytes);
  }
  EXPECT_TRUE(daemon_->running());
  ExpectStoredBytesIntact(*client_, reg_, tokens);
}

TEST_F(ShmChannel, AKilledClientsChannelIsUnmappedWithoutLeaks) {
  const std::string daemon_pid = std::to_string(daemon_->pid());
  ASSERT_TRUE(Eventually([&] { return ChannelMappings(daemon_pid).size() == 1; }));
  const size_t fds_before = OpenFds(daemon_->pid());
  const pid_t victim = StartStoringEngine(daemon_->socket());
  ASSERT_TRUE(Eventually([&] { return ChannelMappings(daemon_pid).size() == 2; }));
  kill(victim, SIGKILL);
  waitpid(victim, nullptr, 0);
  EXPECT_TRUE(Eventually([&] { return ChannelMappings(daemon_pid).size() == 1; }))
      << "the dead client's segment is still mapped in kvstashd";
  // The dead engine's registration keeps its copy fence (one descriptor)
  // until the daemon takes the engine for dead (--peer-timeout-ms, 10 s).
  EXPECT_TRUE(
      Eventually([&] { return OpenFds(daemon_->pid()) == fds_before; }, std::chrono::seconds(15)))
      << OpenFds(daemon_->pid()) << " descriptors open, " << fds_before << " before";
  EXPECT_EQ(ChannelNames(), 0u);
  EXPECT_TRUE(client_->Ping().get().ok());
  EXPECT_TRUE(client_->server_info().shm_channel);
}

TEST_F(ShmChannel, AClosedClientsChannelIsUnmapped) {
  const std::string daemon_pid = std::to_string(daemon_->pid());
  for (int i = 0; i < 5; ++i) {
    std::unique_ptr<Client> brief = Connect();
    ASSERT_NE(brief, nullptr);
    ASSERT_TRUE(Eventually([&] { return brief->server_info().shm_channel; }));
    ASSERT_TRUE(brief->Ping().get().ok());
  }
  EXPECT_TRUE(Eventually([&] { return ChannelMappings(daemon_pid).size() == 1; }));
}

TEST_F(ShmChannel, AfterADaemonRestartTheClientAttachesAFreshChannel) {
  ASSERT_EQ(daemon_->Stop(), 0);
  ASSERT_TRUE(daemon_->Restart().ok());
  ASSERT_TRUE(Eventually([&] {
    return client_->Ping().get().ok() && client_->server_info().restarts == 1 &&
           client_->server_info().shm_channel;
  }));
  EXPECT_EQ(ChannelMappings("self").size(), 1u) << "the old segment is still mapped here";
  EXPECT_TRUE(
      Eventually([&] { return ChannelMappings(std::to_string(daemon_->pid())).size() == 1; }));
  EXPECT_EQ(ChannelNames(), 0u);
  const auto tokens = PromptTokens(11, 128, 0);
  for (const ChunkOutcome& o : FillAndStore(kSeed, tokens, Blocks(0, 8))) {
    EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  }
  ExpectStoredBytesIntact(*client_, reg_, tokens);
}

// A daemon that spins for a whole second after each message, so that its
// awake word still says "polling" when it is stopped: the client fills the
// ring, then sends the rest over the socket; nothing is lost.
class ShmChannelFull : public ShmChannel {
 protected:
  std::vector<std::string> DaemonArgs() const override {
    std::vector<std::string> args = DaemonTest::DaemonArgs();
    args.insert(args.end(), {"--busy-poll-us", "1000000"});
    return args;
  }
  void SetUp() override {
    setenv("KVSTASH_SHM_CHANNEL_RING_BYTES", "4096", 1);
    ShmChannel::SetUp();
    unsetenv("KVSTASH_SHM_CHANNEL_RING_BYTES");
  }
};

TEST_F(ShmChannelFull, AFullRingFallsBackToTheSocketAndLosesNothing) {
  ASSERT_TRUE(client_->Ping().get().ok());
  ASSERT_EQ(kill(daemon_->pid(), SIGSTOP), 0);
  std::vector<decltype(client_->Ping())> pings;
  for (int i = 0; i < 500; ++i) pings.push_back(client_->Ping());
  std::this_thread::sleep_for(milliseconds(100));
  ASSERT_EQ(kill(daemon_->pid(), SIGCONT), 0);
  int failed = 0;
  for (auto& ping : pings) failed += ping.get().ok() ? 0 : 1;
  EXPECT_EQ(failed, 0);
  EXPECT_TRUE(client_->server_info().shm_channel);
  // Frames larger than a quarter ring always go over the socket.
  const auto tokens = PromptTokens(13, 512, 0);
  for (const ChunkOutcome& o : FillAndStore(kSeed, tokens, Blocks(0, 32))) {
    EXPECT_EQ(o.result, ChunkResult::kStored) << o.error.ToString();
  }
}

class ShmChannelOff : public DaemonWithoutChannelTest {};

TEST_F(ShmChannelOff, ADaemonWithItOffRefusesAndClientsUseTheSocket) {
  for (int i = 0; i < 20; ++i) ASSERT_TRUE(client_->Ping().get().ok());
  EXPECT_FALSE(client_->server_info().shm_channel);
  EXPECT_TRUE(ChannelMappings(std::to_string(daemon_->pid())).empty());
  EXPECT_TRUE(ChannelMappings("self").empty());
  EXPECT_EQ(ChannelNames(), 0u);
}

}  // namespace
}  // namespace kvstash::testing
