// The client's I/O thread: owns the DEALER socket and its connection monitor,
// sends queued requests, matches replies to requests by id, fails requests
// whose deadline passed, and keeps the Hello session with kvstashd.
//
// Session rules:
//  - Nothing but a Hello is sent until a Hello succeeded on the current
//    connection; the socket has ZMQ_IMMEDIATE, so requests wait here (not in
//    ZeroMQ) while there is no connection, and their deadline still runs.
//  - A lost connection fails every request already sent with Unavailable (its
//    reply can no longer come), then the next connection says Hello again.
//  - A Hello whose boot id differs from the last one means kvstashd restarted:
//    the boot epoch advances, and requests bound to a registration of an
//    earlier epoch fail with Unavailable instead of being sent (registration
//    ids are only unique within one boot).
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <zmq.hpp>

#include "kvstash/client.h"
#include "pending_requests.h"
#include "submission_queue.h"

namespace kvstash::client {

struct SessionOptions {
  std::string endpoint;
  std::chrono::milliseconds timeout{5000};
  std::string client_name;
  LogSink log;
  std::chrono::microseconds busy_poll{0};  // see ClientOptions::busy_poll_us
};

class IoLoop {
 public:
  // first_hello is satisfied by the outcome of the first Hello.
  IoLoop(SessionOptions options, zmq::context_t& context, SubmissionQueue& queue,
         std::atomic<uint64_t>& next_id, std::promise<Result<ServerInfo>> first_hello);

  // Runs on the I/O thread until the queue is closed, then fails whatever is
  // left with Cancelled and closes the sockets.
  void Run();

  // Thread-safe.
  ServerInfo server_info() const;
  uint64_t boot_epoch() const { return boot_epoch_.load(); }

 private:
  Status OpenSockets();
  void CloseSockets();
  // One round: accept submissions, send, expire, wait. False once closed.
  bool Step();
  // After a setup or socket failure: fail everything with `why` until closed.
  void RunBroken(const Status& why);

  void Accept(Request request);
  void Flush();
  void Poll();
  void ExpireDeadlines();
  void ReceiveReplies();
  void HandleReply(const zmq::message_t& message);
  void HandleMonitorEvents();
  void OnConnected();
  void OnDisconnected();

  // A request of the loop's own (Hello, keep-alive Ping) with a fresh id and
  // the session's timeout; the caller encodes its bytes and queues it.
  Request OwnRequest(const char* kind, ReplyHandler on_reply);
  void StartHandshake();
  void OnHello(Result<Reply> reply);
  // Sends a Ping when nothing went out for a while, so that kvstashd does
  // not take this engine for dead (peer_timeout_ms) and drop its
  // registrations.
  void KeepAlive();

  void Complete(Request& request, Result<Reply> outcome);
  void FailQueued(const Status& why);
  void FailSent(const Status& why);
  void FailAll(StatusCode code, const std::string& why);
  void Log(LogLevel level, const std::string& text) const;

  const SessionOptions options_;
  zmq::context_t& context_;
  SubmissionQueue& queue_;
  std::atomic<uint64_t>& next_id_;
  std::optional<std::promise<Result<ServerInfo>>> first_hello_;

  // I/O thread only.
  std::optional<zmq::socket_t> dealer_;
  std::optional<zmq::socket_t> monitor_;
  PendingRequests pending_;
  std::deque<uint64_t> outbox_;  // ids not yet sent, in order (may hold ended ids)
  bool connected_ = false;
  bool handshaken_ = false;     // a Hello succeeded on this connection
  bool handshake_wanted_ = false;
  uint64_t handshake_id_ = 0;   // the Hello in progress, 0 when none
  bool want_pollout_ = false;
  bool queue_woken_ = true;  // the submission queue's eventfd fired since the last Drain
  Clock::time_point last_activity_;  // busy polling goes on for a while after it
  Clock::time_point last_sent_;      // the last message to kvstashd
  std::chrono::milliseconds keepalive_{0};  // a quarter of the daemon's peer timeout
  uint64_t max_message_bytes_;
  proto::Bytes aligned_;  // a misaligned reply's copy (operator new aligns it)

  mutable std::mutex info_mutex_;
  std::optional<ServerInfo> info_;  // GUARDED_BY(info_mutex_)
  std::atomic<uint64_t> boot_epoch_{1};
};

}  // namespace kvstash::client
