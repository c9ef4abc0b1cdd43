// The copy fence and kvstashd's process (docs/protocol.md "The copy
// fence"): a killed process drops its fence locks while it closes its
// files, and copies it queued on a GPU may still run until it is gone. So
// libkvstash reports a lost daemon's fenced Store or Retrieve failed only
// once the daemon's process has exited, or at once when the process had not
// begun to exit; a pid it cannot verify is not trusted.
//
// A forked stand-in plays kvstashd's process: its main thread holds the
// fence as kvstashd does, and a second thread with a table of files of its
// own (and none of the fence) keeps the process there after the main
// thread has exited and closed the fence, as a GPU's queued copies outlive
// the files of a killed kvstashd. The fake router in this process speaks
// for it on the socket.
#include <gtest/gtest.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <future>
#include <string>
#include <thread>

#include "fake_router.h"
#include "kvstash/client.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::array<uint8_t, 16> kBoot = {7, 7, 7};

double Ms(Clock::duration d) { return std::chrono::duration<double, std::milli>(d).count(); }

// The stand-in's side: one command a line on `commands`, one answer a line
// on `answers` ("ok" or "failed"):
//   open NAME   hold fence NAME as kvstashd does (DaemonFenceHold)
//   hold ID     hold request ID's byte, as a lane copying it
//   exit        end the main thread alone: its files close, the process
//               stays (the answer is the end of `answers`)
[[noreturn]] void RunStandIn(int commands, int answers) {
  std::atomic<bool> apart{false};
  std::thread keeper([&apart] {
    // Its own table of files, with none of the main thread's.
    if (unshare(CLONE_FILES) != 0) _exit(3);
    for (int fd = 3; fd < 1024; ++fd) close(fd);
    apart = true;
    for (;;) pause();
  });
  keeper.detach();
  while (!apart) std::this_thread::yield();
  std::optional<DaemonFenceHold> fence;
  std::string line;
  char c = 0;
  while (read(commands, &c, 1) == 1) {
    if (c != '\n') {
      line += c;
      continue;
    }
    bool ok = false;
    if (line.rfind("open ", 0) == 0) {
      if (std::optional<DaemonFenceHold> opened = DaemonFenceHold::Open(line.substr(5))) {
        fence.emplace(std::move(*opened));
        ok = true;
      }
    } else if (line.rfind("hold ", 0) == 0 && fence) {
      ok = fence->Hold(std::stoull(line.substr(5)));
    } else if (line == "exit") {
      syscall(SYS_exit, 0);  // this thread only
    }
    line.clear();
    const char* answer = ok ? "ok\n" : "failed\n";
    if (write(answers, answer, std::strlen(answer)) < 0) _exit(4);
  }
  _exit(0);
}

class StandInDaemon {
 public:
  // Forks it, before the test starts a router or a client (threads of its
  // own that the child would not have).
  StandInDaemon() {
    int to_child[2], from_child[2];
    if (pipe(to_child) != 0 || pipe(from_child) != 0) return;
    pid_ = fork();
    if (pid_ == 0) {
      close(to_child[1]);
      close(from_child[0]);
      RunStandIn(to_child[0], from_child[1]);
    }
    close(to_child[0]);
    close(from_child[1]);
    commands_ = to_child[1];
    answers_ = from_child[0];
  }
  ~StandInDaemon() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (commands_ >= 0) close(commands_);
    if (answers_ >= 0) close(answers_);
  }
  pid_t pid() const { return pid_; }

  bool Command(const std::string& command) {
    const std::string line = command + "\n";
    if (write(commands_, line.data(), line.size()) != ssize_t(line.size())) return false;
    return ReadAnswer() == "ok";
  }
  // Ends its main thread and returns once that thread's files are closed
  // (its answers pipe reads its end): the fence is free, the process not
  // gone.
  bool EndMainThread() {
    if (write(commands_, "exit\n", 5) != 5) return false;
    char c = 0;
    while (read(answers_, &c, 1) == 1) {
    }
    return true;
  }
  // Whether the process has exited (every thread), without reaping it.
  bool Exited() const {
    siginfo_t info{};
    return waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
  }

 private:
  std::string ReadAnswer() {
    std::string line;
    char c = 0;
    while (read(answers_, &c, 1) == 1 && c != '\n') line += c;
    return line;
  }
  pid_t pid_ = -1;
  int commands_ = -1;
  int answers_ = -1;
};

std::vector<ChunkBlocks> OneChunk() {
  std::vector<ChunkBlocks> chunks(1);
  chunks[0].num_tokens = 256;
  chunks[0].block_ids = {0};
  return chunks;
}

template <typename T>
bool ReadyWithin(std::future<T>& future, milliseconds timeout) {
  return future.wait_for(timeout) == std::future_status::ready;
}

// A client of `router`, whose Hello names `daemon_pid`, with one fenced
// registration (id 7) whose fence the stand-in holds.
struct Session {
  std::unique_ptr<Client> client;
  bool ok = false;
};
Session Connect(FakeRouter& router, StandInDaemon& daemon, uint32_t daemon_pid,
                milliseconds timeout) {
  Session session;
  ClientOptions options;
  options.socket = router.endpoint();
  options.request_timeout = timeout;
  auto connecting = std::async(std::launch::async, [options] { return Client::Connect(options); });
  if (!router.AnswerHello(kBoot, 1024, daemon_pid)) return session;
  auto connected = connecting.get();
  if (!connected.ok()) return session;
  session.client = std::move(*connected);
  RegisterOptions reg;
  reg.model = "m";
  reg.allocations.push_back(HostShm{"/kvstash-fake", 4096});
  reg.layers.push_back(LayerDesc{});
  auto registering = session.client->RegisterKV(reg);
  auto request = router.Receive();
  if (!request || !daemon.Command("open " + FenceName(*request))) return session;
  router.Reply(*request, RegisterKVReply(request->request_id(), 7));
  session.ok = registering.get().ok();
  return session;
}

TEST(CopyFenceProcess, ALostDaemonsRequestIsReportedOnlyOnceItsProcessIsGone) {
  StandInDaemon daemon;
  ASSERT_GT(daemon.pid(), 0);
  auto router = std::make_unique<FakeRouter>();
  Session session = Connect(*router, daemon, uint32_t(daemon.pid()), milliseconds(30000));
  ASSERT_TRUE(session.ok);
  auto store = session.client->Store(7, OneChunk());
  auto sent = router->Receive();
  ASSERT_TRUE(sent);
  ASSERT_TRUE(daemon.Command("hold " + std::to_string(sent->request_id())));
  // Killed: its files close, the fence is free; its copies still run.
  ASSERT_TRUE(daemon.EndMainThread());
  ASSERT_FALSE(daemon.Exited());
  router.reset();  // the connection is lost
  EXPECT_FALSE(ReadyWithin(store, milliseconds(1000)))
      << "reported failed while kvstashd's process was still there";
  ASSERT_FALSE(daemon.Exited());
  const auto killed = Clock::now();
  kill(daemon.pid(), SIGKILL);
  ASSERT_TRUE(ReadyWithin(store, milliseconds(10000)));
  const auto reported = Clock::now();
  EXPECT_TRUE(daemon.Exited());
  EXPECT_EQ(store.get().status().code(), StatusCode::kUnavailable);
  std::printf("reported %.1f ms after the process was killed (deadline 30 s)\n",
              Ms(reported - killed));
}

TEST(CopyFenceProcess, ALostDaemonsIdleRequestIsReportedAtOnceWhileItsProcessLives) {
  // As a frozen kvstashd (SIGSTOP) with a request it is not copying: its
  // process holds its byte, so it has not begun to exit.
  StandInDaemon daemon;
  ASSERT_GT(daemon.pid(), 0);
  auto router = std::make_unique<FakeRouter>();
  Session session = Connect(*router, daemon, uint32_t(daemon.pid()), milliseconds(30000));
  ASSERT_TRUE(session.ok);
  auto store = session.client->Store(7, OneChunk());
  ASSERT_TRUE(router->Receive());
  const auto lost = Clock::now();
  router.reset();
  ASSERT_TRUE(ReadyWithin(store, milliseconds(5000)));
  EXPECT_LT(Clock::now() - lost, milliseconds(2000)) << "not at once: the deadline is 30 s";
  EXPECT_EQ(store.get().status().code(), StatusCode::kUnavailable);
  EXPECT_FALSE(daemon.Exited());
}

// A Hello that names no pid (an older kvstashd) or one that is not the
// fence's holder (kvstashd in another pid namespace, whose pid means
// another process here): the process is not watched, and a lost daemon's
// fenced request is reported failed only at its deadline.
class CopyFenceUnverified : public ::testing::TestWithParam<bool> {};

TEST_P(CopyFenceUnverified, ALostDaemonsRequestIsReportedAtItsDeadline) {
  StandInDaemon daemon;
  ASSERT_GT(daemon.pid(), 0);
  const uint32_t claimed = GetParam() ? uint32_t(getpid()) : 0;  // a live process, not the holder
  constexpr milliseconds kTimeout(1500);
  auto router = std::make_unique<FakeRouter>();
  Session session = Connect(*router, daemon, claimed, kTimeout);
  ASSERT_TRUE(session.ok);
  const auto sent = Clock::now();
  auto store = session.client->Store(7, OneChunk());
  ASSERT_TRUE(router->Receive());
  router.reset();
  EXPECT_FALSE(ReadyWithin(store, milliseconds(700))) << "failed before its deadline";
  ASSERT_TRUE(ReadyWithin(store, milliseconds(5000)));
  EXPECT_GE(Clock::now() - sent, kTimeout);
  EXPECT_EQ(store.get().status().code(), StatusCode::kUnavailable);
}

INSTANTIATE_TEST_SUITE_P(Pids, CopyFenceUnverified, ::testing::Values(false, true),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return std::string(info.param ? "AnotherProcess" : "None");
                         });

}  // namespace
}  // namespace kvstash::testing
