// kvstashd refuses settings that would hurt the node, before it touches
// anything: a pool larger than the memory available, something other than a
// stale socket at the socket path, a live daemon's socket. Folders it creates
// are 0750 whatever the umask; a plain path is an ipc socket.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "daemon_process.h"
#include "kvstash/client.h"

namespace kvstash::testing {
namespace {

namespace fs = std::filesystem;

class StartupChecks : public ::testing::Test {
 protected:
  void SetUp() override {
    char pattern[] = "/tmp/kvstash-startup-XXXXXX";
    ASSERT_NE(mkdtemp(pattern), nullptr);
    dir_ = pattern;
  }
  void TearDown() override {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    std::error_code ignored;
    fs::remove_all(dir_, ignored);
  }
  // kvstashd on the host backend with a small pool and `args`, expected to
  // refuse to start: the exit code and what it printed. A daemon that starts
  // instead is killed after 10 s (exit code -1).
  ProcessResult RunDaemon(std::vector<std::string> args) {
    std::vector<std::string> all = {
        "timeout", "-s",      "KILL",          "10", BinaryPath("kvstashd"), "--backend", "host",
        "--l1-gb", "0.03125", "--l1-slice-mb", "4",  "--log-level",          "warn"};
    all.insert(all.end(), args.begin(), args.end());
    std::string command;
    for (const std::string& a : all) command += "'" + a + "' ";
    command += "2>&1";
    ProcessResult result;
    FILE* pipe = popen(command.c_str(), "r");
    if (pipe == nullptr) return result;
    char buffer[4096];
    size_t n = 0;
    while ((n = fread(buffer, 1, sizeof(buffer), pipe)) > 0) result.output.append(buffer, n);
    const int status = pclose(pipe);
    result.exit_code = WIFEXITED(status) && WEXITSTATUS(status) != 137 ? WEXITSTATUS(status) : -1;
    return result;
  }
  // Starts four kvstashd on `path` at once; checks that exactly one serves
  // and the others refused, then stops it.
  void StartTogether(const std::string& path);
  // Starts kvstashd under `umask_bits` and waits until `endpoint` answers a
  // ping; false if it exits first or never answers.
  bool StartDaemon(const std::string& socket_arg, const std::string& endpoint,
                   mode_t umask_bits = 022, std::vector<std::string> extra = {}) {
    std::vector<std::string> args = {
        BinaryPath("kvstashd"), "--socket", socket_arg,    "--backend", "host",
        "--l1-slice-mb",        "4",        "--log-level", "warn"};
    if (std::find(extra.begin(), extra.end(), "--l1-share") == extra.end()) {
      args.insert(args.end(), {"--l1-gb", "0.03125"});
    }
    args.insert(args.end(), extra.begin(), extra.end());
    pid_ = fork();
    if (pid_ == 0) {
      umask(umask_bits);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (std::chrono::steady_clock::now() < deadline) {
      if (waitpid(pid_, nullptr, WNOHANG) != 0) {
        pid_ = -1;
        return false;
      }
      ClientOptions options;
      options.socket = endpoint;
      options.request_timeout = std::chrono::milliseconds(500);
      auto client = Client::Connect(options);
      if (client.ok() && (*client)->Ping().get().ok()) return true;
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return false;
  }
  static uint64_t MemAvailableBytes() {
    std::ifstream in("/proc/meminfo");
    std::string key;
    uint64_t kb = 0;
    std::string unit;
    while (in >> key >> kb >> unit) {
      if (key == "MemAvailable:") return kb * 1024;
    }
    return 0;
  }

  std::string dir_;
  pid_t pid_ = -1;
};

TEST_F(StartupChecks, PoolLargerThanAvailableMemoryIsRefusedWithBothFigures) {
  const ProcessResult got =
      RunDaemon({"--socket", "ipc://" + dir_ + "/k.sock", "--l1-gb", "65536"});
  EXPECT_EQ(got.exit_code, 1) << got.output;
  EXPECT_NE(got.output.find("65536.00 GiB"), std::string::npos) << got.output;
  EXPECT_NE(got.output.find("MemAvailable"), std::string::npos) << got.output;
  EXPECT_NE(got.output.find("--l1-share"), std::string::npos) << got.output;
  EXPECT_FALSE(fs::exists(dir_ + "/k.sock"));
}

TEST_F(StartupChecks, PoolSizedAsAShareOfAvailableMemory) {
  const std::string path = dir_ + "/k.sock";
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path, 022, {"--l1-share", "0.005"}));
  ClientOptions options;
  options.socket = "ipc://" + path;
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  auto describe = (*client)->Describe().get();
  ASSERT_TRUE(describe.ok()) << describe.status().ToString();
  const auto doc = nlohmann::json::parse(*describe);
  const uint64_t capacity = doc["tiers"][0]["pool"]["capacity_bytes"];
  const double expected = 0.005 * double(MemAvailableBytes());
  EXPECT_GT(double(capacity), expected * 0.5) << *describe;
  EXPECT_LT(double(capacity), expected * 1.5) << *describe;
  const ProcessResult bad =
      RunDaemon({"--socket", "ipc://" + dir_ + "/x.sock", "--l1-share", "0.95"});
  EXPECT_EQ(bad.exit_code, 2) << bad.output;
  EXPECT_NE(bad.output.find("--l1-share 0.95 out of range [0, 0.9]"), std::string::npos)
      << bad.output;
}

TEST_F(StartupChecks, RegularFileAtTheSocketPathIsRefusedAndKept) {
  const std::string path = dir_ + "/k.sock";
  std::ofstream(path) << "precious";
  const ProcessResult got = RunDaemon({"--socket", "ipc://" + path});
  EXPECT_EQ(got.exit_code, 1) << got.output;
  EXPECT_NE(got.output.find(path + " exists and is a regular file, not a socket"),
            std::string::npos)
      << got.output;
  std::ifstream in(path);
  std::string content;
  in >> content;
  EXPECT_EQ(content, "precious");
}

TEST_F(StartupChecks, DirectoryAtTheSocketPathIsRefused) {
  const std::string path = dir_ + "/k.sock";
  fs::create_directory(path);
  const ProcessResult got = RunDaemon({"--socket", "ipc://" + path});
  EXPECT_EQ(got.exit_code, 1) << got.output;
  EXPECT_NE(got.output.find("is a directory, not a socket"), std::string::npos) << got.output;
  EXPECT_TRUE(fs::is_directory(path));
}

TEST_F(StartupChecks, StaleSocketIsReplaced) {
  const std::string path = dir_ + "/k.sock";
  // A socket file nobody listens on, as a crashed daemon leaves behind.
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un address{};
  address.sun_family = AF_UNIX;
  std::strncpy(address.sun_path, path.c_str(), sizeof(address.sun_path) - 1);
  ASSERT_EQ(bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
  close(fd);
  ASSERT_TRUE(fs::is_socket(path));
  EXPECT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path));
}

TEST_F(StartupChecks, LiveDaemonsSocketIsRefused) {
  auto first = DaemonProcess::Start({"--l1-gb", "0.03125", "--l1-slice-mb", "4"});
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  const ProcessResult got = RunDaemon({"--socket", (*first)->socket()});
  EXPECT_EQ(got.exit_code, 1) << got.output;
  EXPECT_NE(got.output.find("another kvstashd is serving"), std::string::npos) << got.output;
  EXPECT_TRUE((*first)->running());
  ClientOptions options;
  options.socket = (*first)->socket();
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  EXPECT_TRUE((*client)->Ping().get().ok());
}

TEST_F(StartupChecks, DaemonsStartedTogetherOnOneSocketLeaveExactlyOneServing) {
  // Checking for a live daemon and binding are two steps: daemons started
  // at once must not all pass the check and each take the socket over.
  const std::string path = dir_ + "/k.sock";
  // Each round is a race; a few make the losing order likely to show.
  for (int round = 0; round < 3; ++round) {
    SCOPED_TRACE("round " + std::to_string(round));
    StartTogether(path);
    if (HasFailure()) return;
  }
}

void StartupChecks::StartTogether(const std::string& path) {
  constexpr int kDaemons = 4;
  std::vector<pid_t> pids;
  for (int i = 0; i < kDaemons; ++i) {
    const std::string log = dir_ + "/d" + std::to_string(i) + ".log";
    std::vector<std::string> args = {BinaryPath("kvstashd"),
                                     "--socket",
                                     "ipc://" + path,
                                     "--backend",
                                     "host",
                                     "--l1-gb",
                                     "0.03125",
                                     "--l1-slice-mb",
                                     "4",
                                     "--log-level",
                                     "warn"};
    const pid_t pid = fork();
    if (pid == 0) {
      const int fd = open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600);
      dup2(fd, 1);
      dup2(fd, 2);
      std::vector<char*> argv;
      for (std::string& a : args) argv.push_back(a.data());
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
    pids.push_back(pid);
  }
  // All but one refuse at once; give them time to, then count.
  std::vector<int> exit_codes(kDaemons, -1);
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  int running = kDaemons;
  while (std::chrono::steady_clock::now() < deadline && running > 1) {
    running = 0;
    for (int i = 0; i < kDaemons; ++i) {
      int status = 0;
      if (exit_codes[i] == -1 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
        exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
      }
      running += exit_codes[i] == -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(500));  // none more exits later
  running = 0;
  for (int i = 0; i < kDaemons; ++i) {
    int status = 0;
    if (exit_codes[i] == -1 && waitpid(pids[i], &status, WNOHANG) == pids[i]) {
      exit_codes[i] = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
    }
    if (exit_codes[i] == -1) {
      ++running;
      continue;
    }
    std::ifstream in(dir_ + "/d" + std::to_string(i) + ".log");
    const std::string log((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_EQ(exit_codes[i], 1) << log;
    EXPECT_NE(log.find("another kvstashd is serving at " + path), std::string::npos) << log;
  }
  EXPECT_EQ(running, 1) << running << " daemons serve on one socket";
  ClientOptions options;
  options.socket = "ipc://" + path;
  options.request_timeout = std::chrono::milliseconds(2000);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Ping().get().ok());
  client->reset();
  for (int i = 0; i < kDaemons; ++i) {
    if (exit_codes[i] != -1) continue;
    kill(pids[i], SIGTERM);
    int status = 0;
    waitpid(pids[i], &status, 0);
    EXPECT_TRUE(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  // The one that served removed what it kept beside the socket.
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".lock"));
  EXPECT_FALSE(fs::exists(path + ".doorbell"));
}

TEST_F(StartupChecks, ADaemonStartedWhileAnotherIsBetweenItsCheckAndItsBindIsRefused) {
  // strace holds the first daemon's bind for 2 s, after it looked at the
  // path: a second daemon then finds no socket there.
  if (std::system("command -v strace >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "needs strace to hold a daemon between its check and its bind";
  }
  const std::string path = dir_ + "/k.sock";
  const std::string pid_file = dir_ + "/first.pid";
  const pid_t tracer = fork();
  if (tracer == 0) {
    const std::string daemon = "echo $$ > '" + pid_file + "'; exec '" + BinaryPath("kvstashd") +
                               "' --socket 'ipc://" + path +
                               "' --backend host --l1-gb 0.03125 --l1-slice-mb 4 "
                               "--log-level warn";
    execlp("strace", "strace", "-f", "-qq", "-o", "/dev/null", "-e", "trace=bind", "-e",
           "inject=bind:delay_enter=2000000", "sh", "-c", daemon.c_str(), nullptr);
    _exit(127);
  }
  pid_t first = 0;
  for (int i = 0; i < 200 && first == 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    std::ifstream in(pid_file);
    in >> first;
  }
  ASSERT_GT(first, 0) << "the first daemon did not start";
  std::this_thread::sleep_for(std::chrono::milliseconds(700));  // it has looked, and waits
  const ProcessResult second = RunDaemon({"--socket", "ipc://" + path});
  EXPECT_EQ(second.exit_code, 1) << "a second daemon served on the first one's path\n"
                                 << second.output;
  EXPECT_NE(second.output.find("another kvstashd is serving at " + path), std::string::npos)
      << second.output;
  // The first one binds (its doorbell's bind is held too) and serves.
  for (int i = 0; i < 1000 && !fs::is_socket(path + ".doorbell"); ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  ClientOptions options;
  options.socket = "ipc://" + path;
  options.request_timeout = std::chrono::milliseconds(5000);
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_TRUE((*client)->Ping().get().ok());
  client->reset();
  kill(first, SIGTERM);
  int status = 0;
  waitpid(tracer, &status, 0);
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".lock"));
}

TEST_F(StartupChecks, WhatAKilledDaemonLeftIsReplacedWithChannelsOnOrOff) {
  const std::string path = dir_ + "/k.sock";
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path));
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  ASSERT_TRUE(fs::is_socket(path));
  ASSERT_TRUE(fs::is_socket(path + ".doorbell"));
  // Without channels there is no doorbell: the dead daemon's goes too.
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path, 022, {"--shm-channel", "off"}));
  EXPECT_FALSE(fs::exists(path + ".doorbell")) << "the dead daemon's doorbell was left";
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  // With channels, a fresh doorbell takes the place of a stale one.
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path));
  kill(pid_, SIGKILL);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path));
  EXPECT_TRUE(fs::is_socket(path + ".doorbell"));
}

TEST_F(StartupChecks, CreatedFoldersAre0750WhateverTheUmask) {
  const std::string path = dir_ + "/open/nested/k.sock";
  ASSERT_TRUE(StartDaemon("ipc://" + path, "ipc://" + path, /*umask=*/0));
  for (const std::string& folder : {dir_ + "/open", dir_ + "/open/nested"}) {
    struct stat st {};
    ASSERT_EQ(stat(folder.c_str(), &st), 0) << folder;
    EXPECT_EQ(st.st_mode & 07777, 0750u) << folder;
  }
  kill(pid_, SIGTERM);
  waitpid(pid_, nullptr, 0);
  pid_ = -1;
  const std::string strict = dir_ + "/strict/k.sock";
  ASSERT_TRUE(StartDaemon("ipc://" + strict, "ipc://" + strict, /*umask=*/077));
  struct stat st {};
  ASSERT_EQ(stat((dir_ + "/strict").c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 07777, 0750u);
}

TEST_F(StartupChecks, PlainPathIsAnIpcSocket) {
  const std::string path = dir_ + "/plain.sock";
  ASSERT_TRUE(StartDaemon(path, "ipc://" + path));
  EXPECT_TRUE(fs::is_socket(path));
}

}  // namespace
}  // namespace kvstash::testing
