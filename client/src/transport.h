// The client's connection to kvstashd: a ZeroMQ context, the I/O thread that
// owns the socket (IoLoop), and the queue that feeds it.
#pragma once

#include <atomic>
#include <cstdint>
#include <future>
#include <memory>
#include <thread>
#include <zmq.hpp>

#include "io_loop.h"
#include "registration_table.h"
#include "submission_queue.h"

namespace kvstash::client {

// Thread-safe.
class Transport {
 public:
  // Starts the I/O thread, which connects and says Hello; first_hello
  // receives the outcome of that Hello.
  static Result<std::unique_ptr<Transport>> Start(SessionOptions options,
                                                  std::future<Result<ServerInfo>>& first_hello);
  // Fails pending requests with Cancelled and joins the I/O thread.
  ~Transport();
  Transport(const Transport&) = delete;
  Transport& operator=(const Transport&) = delete;

  uint64_t NextRequestId() { return next_id_.fetch_add(1); }
  std::chrono::milliseconds timeout() const { return timeout_; }
  // Whether registrations get a copy fence: on ipc endpoints, where kvstashd
  // knows the peer's credentials to open it with.
  bool fences() const { return ipc_; }
  // Hands the request to the I/O thread (setting its timeout and deadline
  // unless the caller did); its handler runs exactly once.
  void Submit(ClientRequest request);

  ServerInfo server_info() const { return loop_->server_info(); }
  RegistrationTable& registrations() { return registrations_; }

 private:
  Transport() = default;

  std::unique_ptr<StageTrace> trace_;  // null unless KVSTASH_TRACE_FILE is set
  std::chrono::milliseconds timeout_{0};
  bool ipc_ = false;
  std::atomic<uint64_t> next_id_{1};
  RegistrationTable registrations_;
  zmq::context_t context_{1};
  SubmissionQueue queue_;
  std::unique_ptr<IoLoop> loop_;
  std::thread thread_;  // runs loop_->Run(); last, so it stops first
};

}  // namespace kvstash::client
