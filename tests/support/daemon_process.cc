// Child processes for integration tests.
#include "daemon_process.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "kvstash/client.h"

namespace kvstash::testing {

std::string BinaryPath(const std::string& name) {
  if (const char* dir = std::getenv("KVSTASH_BIN_DIR"); dir && *dir) {
    return (std::filesystem::path(dir) / name).string();
  }
  return (std::filesystem::read_symlink("/proc/self/exe").parent_path() / name).string();
}

pid_t StartStoringEngine(const std::string& socket) {
  const pid_t pid = fork();
  if (pid == 0) {
    const std::string binary = BinaryPath("kvstash_test_engine");
    execl(binary.c_str(), binary.c_str(), "--socket", socket.c_str(), "--role", "store",
          "--first-prompt", "1000", "--prompts", "100000", "--prompt-tokens", "256", nullptr);
    _exit(127);
  }
  return pid;
}

size_t OpenFds(pid_t pid) {
  std::error_code error;  // a process gone has none: 0
  size_t count = 0;
  for (std::filesystem::directory_iterator it("/proc/" + std::to_string(pid) + "/fd", error), end;
       !error && it != end; it.increment(error)) {
    ++count;
  }
  return count;
}

ProcessResult RunBinary(const std::string& name, const std::vector<std::string>& args) {
  std::string command = BinaryPath(name);
  for (const std::string& a : args) command += " '" + a + "'";
  command += " 2>&1";
  ProcessResult result;
  FILE* pipe = popen(command.c_str(), "r");
  if (!pipe) return result;
  std::array<char, 4096> buffer;
  size_t n;
  while ((n = fread(buffer.data(), 1, buffer.size(), pipe)) > 0)
    result.output.append(buffer.data(), n);
  const int status = pclose(pipe);
  result.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return result;
}

Result<std::unique_ptr<DaemonProcess>> DaemonProcess::Start(const std::vector<std::string>& args) {
  std::unique_ptr<DaemonProcess> d(new DaemonProcess());
  char pattern[] = "/tmp/kvstash-test-XXXXXX";
  if (!mkdtemp(pattern)) return Status::Internal("mkdtemp failed");
  d->dir_ = pattern;
  d->socket_path_ = d->dir_ + "/kvstash.sock";
  d->socket_ = "ipc://" + d->socket_path_;
  const std::string binary = BinaryPath("kvstashd");
  if (access(binary.c_str(), X_OK) != 0) {
    return Status::NotFound("kvstashd not found at " + binary + " (set KVSTASH_BIN_DIR)");
  }
  d->argv_ = {binary, "--socket", d->socket_, "--backend", "host", "--log-level", "warn"};
  d->argv_.insert(d->argv_.end(), args.begin(), args.end());
  Status started = d->Restart();
  if (!started.ok()) return started;
  return d;
}

Status DaemonProcess::Restart() {
  if (pid_ > 0)
    return Status::Internal("kvstashd is still running (pid " + std::to_string(pid_) + ")");
  pid_ = fork();
  if (pid_ == 0) {
    std::vector<char*> argv;
    for (std::string& a : argv_) argv.push_back(a.data());
    argv.push_back(nullptr);
    execv(argv[0], argv.data());
    _exit(127);
  }
  // Ready once it answers a ping.
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
  while (std::chrono::steady_clock::now() < deadline) {
    if (!running()) return Status::Unavailable("kvstashd exited during startup");
    ClientOptions options;
    options.socket = socket_;
    options.request_timeout = std::chrono::milliseconds(500);
    if (access(socket_path_.c_str(), F_OK) == 0) {
      auto client = Client::Connect(options);
      if (client.ok() && (*client)->Ping().get().ok()) return Status::Ok();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::TimedOut("kvstashd did not answer within 20 s");
}

void DaemonProcess::Signal(int signal) {
  if (pid_ > 0) kill(pid_, signal);
}

int DaemonProcess::Wait() {
  if (pid_ <= 0) return -1;
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

bool DaemonProcess::exited() const {
  if (pid_ <= 0) return true;
  siginfo_t info{};
  return waitid(P_PID, id_t(pid_), &info, WEXITED | WNOHANG | WNOWAIT) == 0 && info.si_pid != 0;
}

bool DaemonProcess::running() const {
  if (pid_ <= 0) return false;
  return waitpid(pid_, nullptr, WNOHANG) == 0;
}

int DaemonProcess::Stop() {
  if (pid_ <= 0) return -1;
  kill(pid_, SIGTERM);
  int status = 0;
  waitpid(pid_, &status, 0);
  pid_ = -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
}

DaemonProcess::~DaemonProcess() {
  if (pid_ > 0) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  std::error_code ignored;
  std::filesystem::remove_all(dir_, ignored);
}

}  // namespace kvstash::testing
