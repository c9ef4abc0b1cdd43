// Starts a real kvstashd on a private socket for a test and stops it. The
// binary is found through KVSTASH_BIN_DIR, or beside the test binary.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::testing {

// Path of an executable of ours: $KVSTASH_BIN_DIR/name, else beside this one.
std::string BinaryPath(const std::string& name);

// Runs a binary of ours with args; returns its exit code and what it printed.
struct ProcessResult {
  int exit_code = -1;
  std::string output;  // stdout and stderr together
};
ProcessResult RunBinary(const std::string& name, const std::vector<std::string>& args);

// Forks a kvstash_test_engine that stores prompts on `socket` until it is
// killed (a victim with requests in flight); the caller kills and reaps it.
pid_t StartStoringEngine(const std::string& socket);

// Descriptors open in process `pid` (/proc/<pid>/fd), to check for leaks.
size_t OpenFds(pid_t pid);

class DaemonProcess {
 public:
  // Starts kvstashd with --socket on a fresh private path, --backend host and
  // `args`, and waits until it answers a ping.
  static Result<std::unique_ptr<DaemonProcess>> Start(const std::vector<std::string>& args = {});
  ~DaemonProcess();  // SIGKILL if still running

  const std::string& socket() const { return socket_; }
  const std::string& socket_path() const { return socket_path_; }
  pid_t pid() const { return pid_; }
  // SIGTERM, then waits; returns the exit code (or -signal).
  int Stop();
  // Sends `signal` without waiting (SIGTERM, SIGKILL); Wait reaps it.
  void Signal(int signal);
  int Wait();
  // Starts kvstashd again on the same socket with the same arguments (after
  // Stop or Wait) and waits until it answers a ping.
  Status Restart();
  bool running() const;
  // Whether its process has exited (every thread), without reaping it:
  // thread-safe while nobody waits for it.
  bool exited() const;

 private:
  DaemonProcess() = default;
  std::string dir_;
  std::string socket_path_;
  std::string socket_;
  std::vector<std::string> argv_;
  pid_t pid_ = -1;
};

}  // namespace kvstash::testing
