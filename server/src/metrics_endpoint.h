// The Prometheus endpoint: GET /metrics and GET /healthz over HTTP, served by
// cpp-httplib on a thread this class owns. It knows nothing of the daemon:
// the body of /metrics comes from a callback.
//
// Thread-safe: the callback runs on the server's threads (two at most), so
// it must be too. The destructor stops the server and joins its threads.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "kvstash/status.h"

namespace httplib {
class Server;
}

namespace kvstash::server {

class MetricsEndpoint {
 public:
  using Render = std::function<std::string()>;

  // Binds address:port and starts serving; an address that cannot be bound
  // is an error naming it.
  static Result<std::unique_ptr<MetricsEndpoint>> Start(const std::string& address, uint16_t port,
                                                        Render render);
  ~MetricsEndpoint();
  MetricsEndpoint(const MetricsEndpoint&) = delete;
  MetricsEndpoint& operator=(const MetricsEndpoint&) = delete;

 private:
  explicit MetricsEndpoint(std::unique_ptr<httplib::Server> server);

  std::unique_ptr<httplib::Server> server_;
  std::atomic<bool> stopped_{false};  // the server thread has returned
  std::thread thread_;
};

}  // namespace kvstash::server
