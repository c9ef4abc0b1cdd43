// The client's I/O thread: the socket loop (see io_loop.h for the session
// rules; the session itself is in io_loop_session.cc, reporting requests
// given up in give_ups.cc).
#include "io_loop.h"

#include <zmq.h>

#include <sched.h>
#include <sys/stat.h>

#include <array>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "decode.h"
#include "encode.h"

namespace kvstash::client {

namespace {

// Before the first Hello tells us the daemon's limit.
constexpr uint64_t kDefaultMaxMessageBytes = 64ull << 20;
// Per client context, so one name serves every client of a process.
constexpr char kMonitorEndpoint[] = "inproc://kvstash-client-monitor";
// A daemon that dies closes its socket, which the monitor reports at once;
// heartbeats catch one that hangs whole (SIGSTOP, a frozen host) or a tcp
// peer that vanished: no PONG within kHeartbeatTimeout ends the connection.
// ZeroMQ's I/O threads answer PINGs, so a daemon busy in its frontend is
// not taken for dead.
constexpr int kHeartbeatIntervalMs = 250;
constexpr int kHeartbeatTimeoutMs = 1000;
constexpr int kReconnectIntervalMs = 100;

// Why nobody answers at `endpoint`, for an ipc socket with its file.
std::string NobodyListens(const std::string& endpoint) {
  const std::string ipc = "ipc://";
  if (endpoint.compare(0, ipc.size(), ipc) == 0) {
    const std::string path = endpoint.substr(ipc.size());
    struct stat info {};
    if (::stat(path.c_str(), &info) != 0) {
      return "no kvstashd at " + endpoint + ": " + path +
             " does not exist (is it running? set --socket or KVSTASH_SOCKET)";
    }
    return "no kvstashd listens at " + endpoint + ": connection refused (a stale socket file " +
           "left by a kvstashd that is gone?)";
  }
  return "no kvstashd listens at " + endpoint + ": connection refused";
}

std::string Millis(std::chrono::milliseconds ms) { return std::to_string(ms.count()) + " ms"; }

}  // namespace

IoLoop::IoLoop(SessionOptions options, zmq::context_t& context, SubmissionQueue& queue,
               std::atomic<uint64_t>& next_id, RegistrationTable& registrations,
               std::promise<Result<ServerInfo>> first_hello)
    : options_(std::move(options)),
      context_(context),
      queue_(queue),
      next_id_(next_id),
      registrations_(registrations),
      first_hello_(std::move(first_hello)),
      give_ups_([this](ClientRequest& request, Status why) { Complete(request, std::move(why)); }),
      channel_(
          options_.shm_channel, options_.endpoint, options_.channel_ring_bytes,
          [this](LogLevel level, const std::string& text) { Log(level, text); },
          [this](bool attached) { SetChannelInfo(attached); }),
      spin_(options_.busy_poll),
      max_message_bytes_(kDefaultMaxMessageBytes) {}

ServerInfo IoLoop::server_info() const {
  MutexLock lock(info_mutex_);
  return info_.value_or(ServerInfo{});
}

void IoLoop::Run() {
  Status setup = OpenSockets();
  if (!setup.ok()) {
    RunBroken(setup);
    return;
  }
  StartHandshake();
  try {
    while (Step()) {
    }
  } catch (const zmq::error_t& e) {
    const Status broken =
        Status::Unavailable(std::string("kvstash client I/O failed: ") + e.what());
    Log(LogLevel::kError, broken.message());
    FailAll(broken.code(), broken.message());
    CloseSockets();
    RunBroken(broken);
    return;
  }
  FailAll(StatusCode::kCancelled, "the kvstash::Client was destroyed first");
  CloseSockets();
}

Status IoLoop::OpenSockets() {
  try {
    dealer_.emplace(context_, zmq::socket_type::dealer);
    dealer_->set(zmq::sockopt::linger, 0);
    dealer_->set(zmq::sockopt::immediate, 1);
    dealer_->set(zmq::sockopt::heartbeat_ivl, kHeartbeatIntervalMs);
    dealer_->set(zmq::sockopt::heartbeat_timeout, kHeartbeatTimeoutMs);
    dealer_->set(zmq::sockopt::reconnect_ivl, kReconnectIntervalMs);
    // One identity for the client's life, kept across reconnects: kvstashd
    // ties registrations to it (ZeroMQ reserves identities that start with 0).
    std::array<uint8_t, 16> identity{};
    std::random_device random;
    for (uint8_t& byte : identity) byte = uint8_t(random());
    identity[0] = 'k';
    dealer_->set(zmq::sockopt::routing_id, zmq::const_buffer(identity.data(), identity.size()));
    // Watch the connection so that a lost one fails its requests at once.
    if (zmq_socket_monitor(
            dealer_->handle(), kMonitorEndpoint,
            ZMQ_EVENT_CONNECTED | ZMQ_EVENT_DISCONNECTED | ZMQ_EVENT_CONNECT_RETRIED) != 0) {
      throw zmq::error_t();
    }
    monitor_.emplace(context_, zmq::socket_type::pair);
    monitor_->set(zmq::sockopt::linger, 0);
    monitor_->connect(kMonitorEndpoint);
  } catch (const zmq::error_t& e) {
    CloseSockets();
    return Status::Internal(std::string("cannot set up the client socket: ") + e.what());
  }
  try {
    dealer_->connect(options_.endpoint);
  } catch (const zmq::error_t& e) {
    CloseSockets();
    return Status::InvalidArgument("cannot connect to \"" + options_.endpoint + "\": " + e.what());
  }
  return Status::Ok();
}

void IoLoop::CloseSockets() {
  if (dealer_) zmq_socket_monitor(dealer_->handle(), nullptr, 0);
  monitor_.reset();
  dealer_.reset();
}

bool IoLoop::Step() {
  channel_.FreeDropped();
  // Every Push and Close wakes the queue's eventfd: a busy-polling loop need
  // not read it idly.
  if (queue_woken_) {
    queue_woken_ = false;
    for (ClientRequest& request : queue_.Drain()) {
      Accept(std::move(request));
      spin_.Activity(Clock::now());
    }
  }
  if (queue_.closed()) return false;
  // Before the flush: what an expiry queues (the session's channel once a
  // re-registration timed out and the session is ready, a registration
  // sent again) goes out now, not when the loop next wakes.
  ExpireDeadlines();
  if (!give_ups_.empty()) give_ups_.Retry();
  if (!register_retries_.empty()) RetryRegistrations();
  KeepAlive();
  Flush();
  if (!channel_.WakeDaemon()) {
    // No doorbell, or ringing it failed: an empty message, "look at your
    // ring".
    zmq::message_t doorbell;
    (void)dealer_->send(doorbell, zmq::send_flags::dontwait);
  }
  Poll();
  return true;
}

void IoLoop::RunBroken(const Status& why) {
  if (first_hello_) {
    first_hello_->set_value(why);
    first_hello_.reset();
  }
  for (;;) {
    for (ClientRequest& request : queue_.Drain()) {
      Complete(request, Status(why.code(), request.Name() + " failed: " + why.message()));
    }
    if (queue_.closed()) return;
    queue_.Wait();
  }
}

void IoLoop::Accept(ClientRequest request) {
  if (!connected_ || goodbye_) {
    // Nobody to send it to: say so now rather than at its deadline.
    Complete(request, Status::Unavailable(request.Name() + " not sent: " + down_why_));
    return;
  }
  if (!handshaken_ && handshake_id_ == 0 && registering_again_ == 0) handshake_wanted_ = true;
  outbox_.push_back(request.id);
  pending_.Add(std::move(request));
}

void IoLoop::Flush() {
  want_pollout_ = false;
  if (!handshaken_ && handshake_id_ == 0 && handshake_wanted_) StartHandshake();
  while (!outbox_.empty()) {
    const uint64_t id = outbox_.front();
    ClientRequest* request = pending_.Find(id);
    if (request == nullptr) {  // ended (timed out) before it was sent
      outbox_.pop_front();
      continue;
    }
    if (!handshaken_ && !request->session) return;  // waits for the session
    if (request->registration_id != 0 && !ResolveRegistration(*request)) {
      outbox_.pop_front();
      continue;
    }
    if (request->bytes.size() > max_message_bytes_) {
      outbox_.pop_front();
      Complete(*request,
               Status::TooLarge(request->Name() + " is " + std::to_string(request->bytes.size()) +
                                " bytes, over kvstashd's max_message_bytes of " +
                                std::to_string(max_message_bytes_)));
      continue;
    }
    // Before the send: the daemon may read it before this thread runs again.
    MarkStage(options_.trace, id, TraceStage::kClientSent);
    if (handshaken_ && channel_.Push(request->bytes)) {
      request->sent = true;
      request->via_ring = true;
      last_sent_ = Clock::now();
      proto::Bytes().swap(request->bytes);
      outbox_.pop_front();
      continue;
    }
    zmq::message_t message(request->bytes.data(), request->bytes.size());
    if (!dealer_->send(message, zmq::send_flags::dontwait)) {
      want_pollout_ = true;  // no connection yet, or the pipe is full
      return;
    }
    request->sent = true;
    last_sent_ = Clock::now();
    proto::Bytes().swap(request->bytes);
    outbox_.pop_front();
  }
}

void IoLoop::Poll() {
  zmq_pollitem_t items[] = {
      {dealer_->handle(), 0, short(ZMQ_POLLIN | (want_pollout_ ? ZMQ_POLLOUT : 0)), 0},
      {monitor_->handle(), 0, ZMQ_POLLIN, 0},
      {nullptr, queue_.fd(), ZMQ_POLLIN, 0},
  };
  std::chrono::milliseconds timeout{-1};
  std::optional<Clock::time_point> wake = pending_.NextDeadline();
  if (handshaken_ && keepalive_.count() > 0) {
    const Clock::time_point ping = last_sent_ + keepalive_;
    wake = wake ? std::min(*wake, ping) : ping;
  }
  for (const RegisterRetry& retry : register_retries_) {
    wake = wake ? std::min(*wake, retry.due) : retry.due;
  }
  if (wake) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(*wake - Clock::now());
    timeout = std::max(left + std::chrono::milliseconds(1), std::chrono::milliseconds(0));
  }
  // A request waiting for its fence is looked at again shortly.
  if (!give_ups_.empty() && (timeout.count() < 0 || timeout > GiveUps::kRetry)) {
    timeout = GiveUps::kRetry;
  }
  // Adaptive spinning (docs/deployment.md "Spinning"): while replies are
  // awaited and for a window after the last message, poll without sleeping,
  // so that neither a reply nor the engine's next request waits for this
  // thread to wake up.
  if (spin_.Spinning(Clock::now(), pending_.size() > 0)) timeout = std::chrono::milliseconds(0);
  if (channel_.BeforePoll(timeout.count() != 0)) timeout = std::chrono::milliseconds(0);
  try {
    if (zmq::poll(items, 3, timeout) > 0) {
      spin_.Activity(Clock::now());
    } else if (timeout.count() == 0) {
      sched_yield();  // spinning: the engine's threads come first
    }
  } catch (const zmq::error_t& e) {
    if (e.num() == EINTR) return;
    throw;
  }
  if (items[2].revents & ZMQ_POLLIN) queue_woken_ = true;
  if (items[1].revents & ZMQ_POLLIN) HandleMonitorEvents();
  ReceiveRing();
  if (items[0].revents & ZMQ_POLLIN) ReceiveReplies();
}

void IoLoop::ReceiveRing() {
  channel_.Receive([this](const void* data, size_t size) {
    spin_.Activity(Clock::now());
    HandleReply(data, size);
  });
}

void IoLoop::ExpireDeadlines() {
  for (ClientRequest& request : pending_.TakeExpired(Clock::now())) {
    Status why;
    if (request.sent) {
      Status timed_out = Status::TimedOut(request.Name() + " got no reply from kvstashd at " +
                                          options_.endpoint + " within " + Millis(request.timeout));
      GiveUp(std::move(request), std::move(timed_out));
      continue;
    } else if (connected_) {
      why = Status::Unavailable(request.Name() + " waited " + Millis(request.timeout) +
                                " for the Hello handshake with kvstashd at " + options_.endpoint);
    } else {
      why = Status::Unavailable(request.Name() + " could not be sent within " +
                                Millis(request.timeout) + ": no connection to kvstashd at " +
                                options_.endpoint + " (is it running?)");
    }
    Complete(request, why);
  }
}

void IoLoop::ReceiveReplies() {
  zmq::message_t message;
  while (dealer_->recv(message, zmq::recv_flags::dontwait)) {
    // Replies the daemon put in the ring before this message come first;
    // an empty message is the ring's doorbell.
    ReceiveRing();
    if (message.size() == 0 && !message.more()) continue;
    if (!message.more()) {
      HandleReply(message);
      continue;
    }
    while (message.more() && dealer_->recv(message)) {
    }
    FailSent(Status::Malformed("kvstashd at " + options_.endpoint +
                               " sent a multi-frame message; replies are one frame"));
  }
}

void IoLoop::HandleReply(const zmq::message_t& message) {
  // FlatBuffers reads scalars in place, so the buffer must be aligned for the
  // widest one; ZeroMQ gives no such promise for a message's data.
  const void* data = message.data();
  if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
    aligned_.assign(message.data<uint8_t>(), message.data<uint8_t>() + message.size());
    data = aligned_.data();
  }
  HandleReply(data, message.size());
}

void IoLoop::HandleReply(const void* data, size_t size) {
  auto verified = proto::VerifyEnvelope(data, size, max_message_bytes_);
  if (!verified.ok()) {
    const uint64_t id = PeekRequestId(data, size);
    if (ClientRequest* request = id != 0 ? pending_.Find(id) : nullptr) {
      Complete(*request, Status(verified.status().code(),
                                "the reply to " + request->Name() +
                                    " is unusable: " + verified.status().message()));
    } else {
      FailSent(Status(verified.status().code(),
                      "kvstashd at " + options_.endpoint +
                          " sent a reply naming no known request: " + verified.status().message()));
    }
    return;
  }
  const wire::Envelope& envelope = **verified;
  const uint64_t id = envelope.request_id();
  MarkStage(options_.trace, id, TraceStage::kClientReceived);
  if (std::optional<std::string> reason = DecodeGoodbye(envelope)) {
    OnGoodbye(*reason);
    return;
  }
  if (std::optional<std::string> reason = DecodeChannelClosed(envelope)) {
    OnChannelClosed(*reason);
    return;
  }
  if (const wire::ErrorReply* error = envelope.body_as_ErrorReply()) {
    StatusCode code = proto::FromWire(error->code());
    if (code == StatusCode::kOk) code = StatusCode::kInternal;
    const std::string text = error->message() ? error->message()->str() : std::string();
    if (id == 0) {
      FailSent(
          Status(code, "kvstashd at " + options_.endpoint + " could not read a request: " + text));
    } else if (ClientRequest* request = pending_.Find(id)) {
      Complete(*request, Status(code, text));
    }
    return;
  }
  ClientRequest* request = pending_.Find(id);
  if (request == nullptr && late_registrations_.erase(id) > 0) {
    // A registration made again after its request timed out: nobody uses it.
    if (Result<RegisteredKv> late = DecodeRegisterKV(envelope); late.ok()) {
      Log(LogLevel::kWarn, "kvstashd registered registration " + std::to_string(late->id) +
                               " after its request had timed out; unregistering it");
      Unregister(late->id, RequestKind::kUnregisterLate);
    }
    return;
  }
  if (request == nullptr || !request->sent) {
    Log(LogLevel::kDebug,
        "dropped a reply to request " + std::to_string(id) + ", which already ended (timed out?)");
    return;
  }
  Complete(*request, Reply{&envelope});
}

void IoLoop::HandleMonitorEvents() {
  zmq::message_t event;
  while (monitor_->recv(event, zmq::recv_flags::dontwait)) {
    uint16_t id = 0;
    if (event.size() >= sizeof(id)) std::memcpy(&id, event.data(), sizeof(id));
    // The second frame (the endpoint) arrives with the first.
    zmq::message_t endpoint;
    while (event.more() && monitor_->recv(endpoint, zmq::recv_flags::dontwait)) {
      if (!endpoint.more()) break;
    }
    if (id == ZMQ_EVENT_CONNECTED) OnConnected();
    if (id == ZMQ_EVENT_DISCONNECTED) OnDisconnected();
    if (id == ZMQ_EVENT_CONNECT_RETRIED) OnConnectFailed();
  }
}

void IoLoop::OnConnected() {
  connected_ = true;
  goodbye_ = false;
  Log(LogLevel::kDebug, "connected to kvstashd at " + options_.endpoint);
  if (!handshaken_ && handshake_id_ == 0 && registering_again_ == 0) handshake_wanted_ = true;
}

void IoLoop::OnDisconnected() {
  connected_ = false;
  Log(LogLevel::kWarn, "lost the connection to kvstashd at " + options_.endpoint);
  EndSession(
      goodbye_ ? down_why_
               : "the connection to kvstashd at " + options_.endpoint + " was lost (reconnecting)",
      goodbye_ ? GiveUpCause::kGoodbye : GiveUpCause::kLostDaemon);
}

void IoLoop::OnConnectFailed() {
  connected_ = false;
  const std::string why = NobodyListens(options_.endpoint);
  if (first_hello_) {
    // Connect: nothing to wait for.
    first_hello_->set_value(Status::Unavailable(why));
    first_hello_.reset();
  }
  if (handshaken_ || down_why_ != why) Log(LogLevel::kDebug, why + " (retrying)");
  EndSession(why + " (retrying)", goodbye_ ? GiveUpCause::kGoodbye : GiveUpCause::kLostDaemon);
}

void IoLoop::Complete(ClientRequest& request, Result<Reply> outcome) {
  // Take it out first: the handler may run code that touches pending_.
  std::optional<ClientRequest> taken = pending_.Take(request.id);
  ClientRequest& owned = taken ? *taken : request;
  ReplyHandler handler = std::move(owned.on_reply);
  MarkStage(options_.trace, owned.id, TraceStage::kClientDone);
  if (handler) handler(std::move(outcome));
}

void IoLoop::FailQueued(const Status& why) {
  std::deque<uint64_t> ids;
  ids.swap(outbox_);
  for (uint64_t id : ids) {
    if (ClientRequest* request = pending_.Find(id)) {
      Complete(*request, Status(why.code(), request->Name() + " not sent: " + why.message()));
    }
  }
}

void IoLoop::FailSent(const Status& why, GiveUpCause cause) {
  for (ClientRequest& request : pending_.TakeSent()) {
    const std::string name = request.Name();
    request.cause = cause;
    GiveUp(std::move(request), Status(why.code(), name + " failed: " + why.message()));
  }
}

void IoLoop::GiveUp(ClientRequest request, Status why) {
  give_ups_.GiveUp(std::move(request), std::move(why), goodbye_);
}

void IoLoop::FailAll(StatusCode code, const std::string& why) {
  outbox_.clear();
  std::vector<ClientRequest> all = pending_.TakeAll();
  for (ClientRequest& request : queue_.Drain()) all.push_back(std::move(request));
  for (ClientRequest& request : all) {
    const std::string name = request.Name();
    GiveUp(std::move(request), Status(code, name + " did not complete: " + why));
  }
  give_ups_.Finish();  // the loop ends here: wait for the fences now
  if (first_hello_) {
    first_hello_->set_value(Status(code, why));
    first_hello_.reset();
  }
}

void IoLoop::Log(LogLevel level, const std::string& text) const {
  if (!options_.log) return;
  try {
    options_.log(level, text);
  } catch (...) {
    // A throwing sink must not take the I/O thread down.
  }
}

}  // namespace kvstash::client
