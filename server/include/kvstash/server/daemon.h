// kvstashd as a library: the daemon binds its ROUTER socket and serves until
// asked to stop. kvstashd's main.cc is a thin shell over this class, and
// tests may run a daemon in-process.
#pragma once

#include <memory>

#include "kvstash/config/server_config.h"
#include "kvstash/status.h"

namespace kvstash::server {

class Daemon {
 public:
  // Builds the backend, L1 pool (pinned in the background), index and
  // transfer workers, and starts the metrics endpoint when metrics_port is
  // set (a port it cannot bind is an error here). The socket binds in Run.
  static Result<std::unique_ptr<Daemon>> Create(const config::ServerConfig& config);
  ~Daemon();
  Daemon(const Daemon&) = delete;
  Daemon& operator=(const Daemon&) = delete;

  // Binds the socket and serves on the calling thread, which owns the socket,
  // until RequestStop. Then answers or fails every request in flight, closes
  // the socket and removes its file. Returns the reason it could not serve.
  Status Run();
  // Thread-safe and async-signal-safe (one write to an eventfd).
  void RequestStop();

 private:
  struct Impl;
  explicit Daemon(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::server
