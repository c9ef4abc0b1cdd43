// The client's I/O thread: owns the DEALER socket and its connection monitor,
// sends queued requests, matches replies to requests by id, fails requests
// whose deadline passed (io_loop.cc), and keeps the session with kvstashd
// (io_loop_session.cc). Requests given up behind their copy fence wait in
// GiveUps (give_ups.h).
//
// Session rules:
//  - A session is ready once a Hello succeeded on the current connection and
//    every live registration is registered on the daemon that answered it.
//    Until then only the session's own requests go out; the others wait here
//    (not in ZeroMQ: ZMQ_IMMEDIATE), their deadlines running.
//  - A lost connection (the monitor's DISCONNECTED: a daemon that exits or
//    dies closes its socket; ZeroMQ heartbeats turn a hung one into that
//    within kHeartbeatTimeout) or a Goodbye from kvstashd fails every request
//    sent or waiting with Unavailable: at once, except a sent Store or
//    Retrieve, failed only once kvstashd can copy none of it any more (its
//    copy fence and kvstashd's process, see GiveUps). While no connection is
//    up, new requests fail with Unavailable at once; ZeroMQ keeps
//    reconnecting.
//  - Before the first Hello, a failed connect attempt (no socket file, or
//    nothing listening: ZeroMQ's CONNECT_RETRIED) fails Connect at once.
//  - A Hello whose boot id differs from the last one means kvstashd
//    restarted: `restarts` counts it, and every registration this client
//    holds is registered again (RegistrationTable) before the session is ready;
//    requests naming one get the new daemon id written into their bytes.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <deque>
#include <future>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>
#include <zmq.hpp>

#include "encode.h"
#include "give_ups.h"
#include "kvstash/client.h"
#include "kvstash/runtime/adaptive_spin.h"
#include "kvstash/runtime/stage_trace.h"
#include "kvstash/runtime/thread_annotations.h"
#include "pending_requests.h"
#include "registration_table.h"
#include "shm_channel_client.h"
#include "submission_queue.h"

namespace kvstash::client {

struct SessionOptions {
  std::string endpoint;
  std::chrono::milliseconds timeout{5000};
  std::string client_name;
  LogSink log;
  std::chrono::microseconds busy_poll{0};  // see ClientOptions::busy_poll_us
  StageTrace* trace = nullptr;             // may be null; outlives the loop
  bool shm_channel = true;                 // see ClientOptions::shm_channel (ipc only)
  uint64_t channel_ring_bytes = channel::kDefaultRingBytes;
};

class IoLoop {
 public:
  // first_hello is satisfied by the outcome of the first Hello.
  IoLoop(SessionOptions options, zmq::context_t& context, SubmissionQueue& queue,
         std::atomic<uint64_t>& next_id, RegistrationTable& registrations,
         std::promise<Result<ServerInfo>> first_hello);

  // Runs on the I/O thread until the queue is closed, then fails whatever is
  // left with Cancelled and closes the sockets.
  void Run();

  // Thread-safe.
  ServerInfo server_info() const;

 private:
  // ---- The socket loop (io_loop.cc) ----
  Status OpenSockets();
  void CloseSockets();
  // One round: accept submissions, send, expire, wait. False once closed.
  bool Step();
  // After a setup or socket failure: fail everything with `why` until closed.
  void RunBroken(const Status& why);

  void Accept(ClientRequest request);
  void Flush();
  void Poll();
  void ExpireDeadlines();
  void ReceiveReplies();
  void HandleReply(const zmq::message_t& message);
  void HandleReply(const void* data, size_t size);
  // Replies waiting in the reply ring, in order.
  void ReceiveRing();
  void HandleMonitorEvents();
  void OnConnected();
  void OnDisconnected();
  void OnConnectFailed();

  void Complete(ClientRequest& request, Result<Reply> outcome);
  // Reports a request failed. One that kvstashd may still be copying (a
  // sent Store or Retrieve) is reported only once kvstashd can copy none of
  // it any more (GiveUps); until then it waits in give_ups_.
  void GiveUp(ClientRequest request, Status why);
  void FailQueued(const Status& why);
  void FailSent(const Status& why, GiveUpCause cause = GiveUpCause::kRequest);
  void FailAll(StatusCode code, const std::string& why);
  void Log(LogLevel level, const std::string& text) const;

  // ---- The session (io_loop_session.cc) ----
  // The shared-memory channel (docs/protocol.md "Shared-memory channel"):
  // attached once a session is ready, on ipc endpoints; dropped when the
  // session ends (a restarted daemon gets a fresh one) or kvstashd closes it.
  void AttachChannel();
  void OnChannelClosed(const std::string& reason);
  void SetChannelInfo(bool attached);
  void OnGoodbye(const std::string& reason);
  // Fails what is sent and what waits with Unavailable(why); the session
  // must start again.
  void EndSession(const std::string& why, GiveUpCause cause);
  // Writes the daemon's current id of the request's registration into its
  // bytes; false when it was completed instead (registration not usable).
  bool ResolveRegistration(ClientRequest& request);

  // A request of the loop's own (Hello, keep-alive Ping) with a fresh id and
  // the session's timeout; the caller encodes its bytes and queues it.
  ClientRequest OwnRequest(RequestKind kind, ReplyHandler on_reply);
  static Header HeaderOf(const ClientRequest& request, uint64_t registration_id = 0);
  void StartHandshake();
  void OnHello(Result<Reply> reply);
  // Registers again what the daemon of `boot` does not hold; then Ready.
  void RegisterAgain(const BootId& boot);
  // One registration again (`attempt`: how many failed before). One that
  // fails for a cause that may pass (MayPass) is tried again after a pause
  // that doubles from kRegisterAgainFirstPause, while the session lasts.
  void SendRegisterAgain(const RegistrationTable::Stale& stale, const BootId& boot,
                         uint32_t attempt);
  void RetryRegistrations();
  void Unregister(uint64_t daemon_id, RequestKind kind);
  static bool MayPass(StatusCode code) {
    return code == StatusCode::kTimedOut || code == StatusCode::kUnavailable ||
           code == StatusCode::kResourceExhausted || code == StatusCode::kDeviceError;
  }
  static constexpr std::chrono::milliseconds kRegisterAgainFirstPause{500};
  static constexpr std::chrono::milliseconds kRegisterAgainLongestPause{15000};
  struct RegisterRetry {
    uint64_t engine_id;
    uint32_t attempt;
    Clock::time_point due;
  };
  void Ready();
  // Sends a Ping when nothing went out for a while, so that kvstashd does
  // not take this engine for dead (peer_timeout_ms) and drop its
  // registrations.
  void KeepAlive();

  const SessionOptions options_;
  zmq::context_t& context_;
  SubmissionQueue& queue_;
  std::atomic<uint64_t>& next_id_;
  RegistrationTable& registrations_;
  std::optional<std::promise<Result<ServerInfo>>> first_hello_;

  // I/O thread only.
  std::optional<zmq::socket_t> dealer_;
  std::optional<zmq::socket_t> monitor_;
  PendingRequests pending_;
  std::deque<uint64_t> outbox_;  // ids not yet sent, in order (may hold ended ids)
  GiveUps give_ups_;             // failed, waiting for their fence (GiveUp)
  bool connected_ = false;
  bool handshaken_ = false;       // the session is ready (see the session rules)
  bool goodbye_ = false;          // kvstashd said it is stopping; until the next connection
  std::string down_why_;          // why no session: for requests failed at once
  uint64_t session_ = 0;          // counts successful Hellos
  size_t registering_again_ = 0;  // outstanding RegisterKVs of this session
  std::vector<RegisterRetry> register_retries_;  // failed ones, to send again when due
  std::set<uint64_t> late_registrations_;        // ids of re-registrations that timed out
  BootId boot_{};                                // of the daemon that answered the last Hello
  uint32_t daemon_pid_ = 0;                      // what that daemon's Hello named (copy fences)
  bool handshake_wanted_ = false;
  uint64_t handshake_id_ = 0;  // the Hello in progress, 0 when none
  bool want_pollout_ = false;
  ClientChannel channel_;
  bool queue_woken_ = true;      // the submission queue's eventfd fired since the last Drain
  AdaptiveSpin spin_;            // polls on the core for a while after activity
  Clock::time_point last_sent_;  // the last message to kvstashd
  std::chrono::milliseconds keepalive_{0};  // a quarter of the daemon's peer timeout
  uint64_t max_message_bytes_;
  proto::Bytes aligned_;  // a misaligned reply's copy (operator new aligns it)

  mutable Mutex info_mutex_;
  std::optional<ServerInfo> info_ KVSTASH_GUARDED_BY(info_mutex_);
};

}  // namespace kvstash::client
