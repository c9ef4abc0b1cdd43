// Real redis-server processes for the L3 tests: a single instance or a
// Redis Cluster of several, on free loopback ports, in a private directory,
// killed and restarted on demand.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::tiers::testing {

// Whether redis-server (and redis-cli) can be run; tests skip with a
// message when not.
bool RedisAvailable();

class RedisProcess {
 public:
  // Starts redis-server on a free port; `extra` are more arguments.
  static Result<std::unique_ptr<RedisProcess>> Start(const std::vector<std::string>& extra = {});
  ~RedisProcess();  // SIGKILL

  int port() const { return port_; }
  std::string endpoint() const { return "127.0.0.1:" + std::to_string(port_); }
  void Kill();       // SIGKILL, and waits
  void Pause();      // SIGSTOP: alive but silent (a hung server)
  void Resume();     // SIGCONT
  Status Restart();  // same port, same arguments, empty data
  // Runs one command through redis-cli against this server; its output.
  std::string Cli(const std::vector<std::string>& args) const;

 private:
  RedisProcess() = default;
  Status Launch();
  std::string dir_;
  std::vector<std::string> args_;
  int port_ = 0;
  pid_t pid_ = -1;
};

// Three (or `nodes`) redis-server in cluster mode joined by
// `redis-cli --cluster create`, ready when every node says cluster_state:ok.
class RedisCluster {
 public:
  static Result<std::unique_ptr<RedisCluster>> Start(int nodes = 3);
  std::vector<std::string> endpoints() const;
  RedisProcess& node(size_t i) { return *nodes_[i]; }

 private:
  std::vector<std::unique_ptr<RedisProcess>> nodes_;
};

}  // namespace kvstash::tiers::testing
