// The ZeroMQ echo: each socket belongs to one thread.
#include "zmq_echo.h"

#include <unistd.h>

#include <chrono>
#include <string>
#include <thread>
#include <zmq.hpp>
#include <zmq_addon.hpp>

namespace kvstash::bench {

Result<std::vector<double>> ZmqRoundTripsUs(size_t message_bytes, int count) {
  const std::string endpoint =
      "ipc:///tmp/kvstash-bench-echo-" + std::to_string(::getpid()) + ".sock";
  constexpr int kWarmup = 100;
  try {
    zmq::context_t context(1);
    zmq::socket_t router(context, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.bind(endpoint);
    std::thread echo([&router, total = count + kWarmup] {
      try {
        for (int i = 0; i < total; ++i) {
          std::vector<zmq::message_t> frames;
          if (!zmq::recv_multipart(router, std::back_inserter(frames))) return;
          zmq::send_multipart(router, frames);
        }
      } catch (const zmq::error_t&) {
        // the context was shut down: the measuring side failed
      }
    });
    // However the measuring side ends, the echo thread ends first.
    struct Joiner {
      zmq::context_t& context;
      std::thread& thread;
      ~Joiner() {
        context.shutdown();
        thread.join();
      }
    } joiner{context, echo};
    zmq::socket_t dealer(context, zmq::socket_type::dealer);
    dealer.set(zmq::sockopt::linger, 0);
    dealer.connect(endpoint);
    const std::string payload(message_bytes, 'k');
    std::vector<double> micros;
    for (int i = 0; i < count + kWarmup; ++i) {
      const auto start = std::chrono::steady_clock::now();
      dealer.send(zmq::buffer(payload), zmq::send_flags::none);
      zmq::message_t reply;
      (void)dealer.recv(reply, zmq::recv_flags::none);
      if (i >= kWarmup) {
        micros.push_back(
            std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - start)
                .count());
      }
    }
    ::unlink(endpoint.substr(6).c_str());
    return micros;
  } catch (const zmq::error_t& e) {
    return Status::Unavailable("raw ZeroMQ round trip on " + endpoint + ": " + e.what());
  }
}

}  // namespace kvstash::bench
