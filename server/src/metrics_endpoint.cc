// The metrics endpoint on cpp-httplib.
#include "metrics_endpoint.h"

#include <httplib.h>
#include <sys/socket.h>

#include <cerrno>
#include <cstring>

#include "prometheus_text.h"

namespace kvstash::server {

namespace {

// Scrapes are rare and small: two threads, not one per core.
constexpr size_t kServerThreads = 2;

}  // namespace

Result<std::unique_ptr<MetricsEndpoint>> MetricsEndpoint::Start(const std::string& address,
                                                                uint16_t port, Render render) {
  auto server = std::make_unique<httplib::Server>();
  // httplib owns and deletes the queue it asks for.
  server->new_task_queue = [] { return new httplib::ThreadPool(kServerThreads); };
  server->Get("/metrics", [render](const httplib::Request&, httplib::Response& response) {
    response.set_content(render(), kPrometheusContentType);
  });
  server->Get("/healthz", [](const httplib::Request&, httplib::Response& response) {
    response.set_content("ok\n", "text/plain");
  });
  // SO_REUSEADDR alone: httplib's default, SO_REUSEPORT, lets a second
  // daemon bind the same port and take half the scrapes.
  server->set_socket_options([](socket_t socket) {
    const int yes = 1;
    setsockopt(socket, SOL_SOCKET, SO_REUSEADDR, &yes, sizeof(yes));
  });
  errno = 0;
  if (!server->bind_to_port(address, port)) {
    const int error = errno;
    return Status::Unavailable("cannot serve metrics on " + address + ":" + std::to_string(port) +
                               (error ? std::string(": ") + std::strerror(error) : std::string()));
  }
  return std::unique_ptr<MetricsEndpoint>(new MetricsEndpoint(std::move(server)));
}

MetricsEndpoint::MetricsEndpoint(std::unique_ptr<httplib::Server> server)
    : server_(std::move(server)), thread_([this] {
        server_->listen_after_bind();
        stopped_ = true;
      }) {
  // stop() does nothing until the server runs: wait for it, so that the
  // destructor's stop is never lost.
  while (!server_->is_running() && !stopped_) std::this_thread::yield();
}

MetricsEndpoint::~MetricsEndpoint() {
  server_->stop();
  thread_.join();
}

}  // namespace kvstash::server
