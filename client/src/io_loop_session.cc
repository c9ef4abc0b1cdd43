// The client's session with kvstashd (see io_loop.h for the session rules):
// the Hello handshake, registering again after a restart of kvstashd,
// keep-alive Pings, and the shared-memory channel's attach and close.
#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "decode.h"
#include "encode.h"
#include "io_loop.h"

namespace kvstash::client {

void IoLoop::AttachChannel() {
  std::string name;
  uint64_t ring_bytes = 0;
  const uint64_t attaching = channel_.Begin(&name, &ring_bytes);
  if (attaching == 0) return;
  ClientRequest attach =
      OwnRequest(RequestKind::kAttachChannel,
                 [this, attaching](Result<Reply> reply) { channel_.Attached(attaching, reply); });
  attach.bytes = EncodeAttachChannel(HeaderOf(attach), name, ring_bytes, ring_bytes);
  attach.session = true;
  outbox_.push_front(attach.id);
  pending_.Add(std::move(attach));
}

void IoLoop::OnChannelClosed(const std::string& reason) {
  if (!channel_.ready()) return;
  Log(LogLevel::kError, "kvstashd at " + options_.endpoint +
                            " closed this client's shared-memory channel: " + reason);
  channel_.Drop(reason);
  // What the daemon read from the ring before is answered over the socket;
  // what it did not will never be: fail them all now, not at their deadline.
  for (ClientRequest& request : pending_.TakeSentThroughRing()) {
    const std::string name = request.Name();
    GiveUp(std::move(request), Status::Unavailable(name + " was sent through the shared-memory " +
                                                   "channel, which kvstashd closed: " + reason));
  }
}

void IoLoop::SetChannelInfo(bool attached) {
  MutexLock lock(info_mutex_);
  if (info_) info_->shm_channel = attached;
}

void IoLoop::OnGoodbye(const std::string& reason) {
  Log(LogLevel::kWarn, "kvstashd at " + options_.endpoint + " said goodbye: " + reason);
  goodbye_ = true;
  EndSession("kvstashd at " + options_.endpoint + " is stopping (" +
                 (reason.empty() ? std::string("Goodbye") : reason) + "); reconnecting",
             GiveUpCause::kGoodbye);
}

void IoLoop::EndSession(const std::string& why, GiveUpCause cause) {
  // A daemon that restarts maps nothing of ours; the next session attaches
  // a fresh channel.
  channel_.Drop(why);
  handshaken_ = false;
  down_why_ = why;
  registering_again_ = 0;
  register_retries_.clear();    // the next session registers every stale one again
  late_registrations_.clear();  // the daemon dropped what this session registered
  FailSent(Status::Unavailable(why), cause);
  FailQueued(Status::Unavailable(why));
}

bool IoLoop::ResolveRegistration(ClientRequest& request) {
  std::optional<Result<uint64_t>> where = registrations_.Resolve(request.registration_id, boot_);
  if (!where) return true;  // not this client's: kvstashd judges the id
  if (!where->ok()) {
    if (request.unregisters) {
      // Nothing on this daemon to unregister: forgetting it is the whole job.
      registrations_.Remove(request.registration_id, /*drained=*/false);
      const proto::Bytes bytes = EncodeUnregisterKVReply(request.id);
      auto envelope = proto::VerifyEnvelope(bytes.data(), bytes.size(), bytes.size());
      if (envelope.ok()) {
        Complete(request, Reply{*envelope});
        return false;
      }
    }
    Complete(request,
             Status::Unavailable(request.Name() + " not sent: " + where->status().message()));
    return false;
  }
  if (**where != request.wire_registration_id) {
    RewriteRegistrationId(request.bytes, **where);
    request.wire_registration_id = **where;
  }
  if (request.copies_blocks) {
    request.fence = registrations_.Fence(request.registration_id);
    // Identified once, while the daemon that holds it is surely there.
    if (request.fence && !request.fence->watch_decided()) {
      if (Status watched = request.fence->WatchDaemon(daemon_pid_); !watched.ok()) {
        Log(LogLevel::kInfo, "copy fence of registration " +
                                 std::to_string(request.registration_id) +
                                 ": kvstashd's process is not watched (" + watched.message() +
                                 "); if the connection is lost, its Stores and Retrieves are " +
                                 "reported failed at their deadline");
      }
    }
  }
  return true;
}

ClientRequest IoLoop::OwnRequest(RequestKind kind, ReplyHandler on_reply) {
  ClientRequest request;
  request.id = next_id_.fetch_add(1);
  request.kind = kind;
  request.timeout = options_.timeout;
  request.deadline = Clock::now() + options_.timeout;
  request.on_reply = std::move(on_reply);
  return request;
}

Header IoLoop::HeaderOf(const ClientRequest& request, uint64_t registration_id) {
  const auto ns =
      std::chrono::duration_cast<std::chrono::nanoseconds>(request.deadline.time_since_epoch());
  return Header{request.id, uint64_t(ns.count()), registration_id};
}

void IoLoop::StartHandshake() {
  ClientRequest hello =
      OwnRequest(RequestKind::kHello, [this](Result<Reply> reply) { OnHello(std::move(reply)); });
  hello.bytes = EncodeHello(HeaderOf(hello), options_.client_name);
  hello.session = true;
  handshake_wanted_ = false;
  handshake_id_ = hello.id;
  pending_.Add(std::move(hello));
  outbox_.push_front(handshake_id_);
}

void IoLoop::KeepAlive() {
  if (!handshaken_ || keepalive_.count() == 0 || !outbox_.empty()) return;
  if (Clock::now() - last_sent_ < keepalive_) return;
  ClientRequest ping =
      OwnRequest(RequestKind::kKeepAlive, [](Result<Reply>) {});  // only its arrival matters
  ping.bytes = EncodePing(HeaderOf(ping));
  outbox_.push_back(ping.id);
  pending_.Add(std::move(ping));
}

void IoLoop::OnHello(Result<Reply> reply) {
  handshake_id_ = 0;
  Result<ServerInfo> info = reply.ok() ? DecodeHello(*reply->envelope) : reply.status();
  if (info.ok() && info->protocol_version != proto::kProtocolVersion) {
    info = Status(StatusCode::kUnsupportedVersion,
                  "kvstashd at " + options_.endpoint + " speaks protocol version " +
                      std::to_string(info->protocol_version) + ", this client " +
                      std::to_string(proto::kProtocolVersion));
  }
  if (!info.ok()) {
    const Status failed(info.status().code(), "handshake failed: " + info.status().message());
    Log(LogLevel::kWarn, failed.message());
    FailQueued(failed);
    if (first_hello_) {
      first_hello_->set_value(failed);
      first_hello_.reset();
    }
    return;
  }
  bool restarted = false;
  std::string old_boot;
  {
    MutexLock lock(info_mutex_);
    restarted = info_.has_value() && info_->boot_id != info->boot_id;
    if (restarted) old_boot = ToHex(info_->boot_id.data(), info_->boot_id.size());
    info->restarts = (info_ ? info_->restarts : 0) + (restarted ? 1 : 0);
    info_ = *info;
  }
  if (restarted) {
    Log(LogLevel::kWarn, "kvstashd at " + options_.endpoint + " restarted (boot id " + old_boot +
                             " -> " + ToHex(info->boot_id.data(), info->boot_id.size()) +
                             "): registering this client's registrations again; chunks stored " +
                             "before are gone");
  }
  if (info->max_message_bytes != 0) max_message_bytes_ = info->max_message_bytes;
  keepalive_ = std::chrono::milliseconds(info->peer_timeout_ms / 4);
  boot_ = info->boot_id;
  daemon_pid_ = info->pid;
  ++session_;
  RegisterAgain(boot_);
}

void IoLoop::RegisterAgain(const BootId& boot) {
  std::vector<RegistrationTable::Stale> stale = registrations_.StaleFor(boot);
  if (stale.empty()) return Ready();
  registering_again_ = stale.size();
  // Ahead of everything that waits for the session, in registration order.
  for (auto it = stale.rbegin(); it != stale.rend(); ++it) {
    SendRegisterAgain(*it, boot, /*attempt=*/0);
  }
}

void IoLoop::SendRegisterAgain(const RegistrationTable::Stale& stale, const BootId& boot,
                               uint32_t attempt) {
  const uint64_t engine_id = stale.engine_id;
  const uint64_t session = session_;
  std::shared_ptr<GiveUpFence> fence;
  if (options_.endpoint.rfind("ipc://", 0) == 0) {  // kvstashd checks it against our credentials
    Result<std::shared_ptr<GiveUpFence>> created = GiveUpFence::Create();
    if (created.ok()) fence = std::move(*created);
  }
  ClientRequest again = OwnRequest(RequestKind::kRegisterAgain, nullptr);
  again.on_reply = [this, engine_id, session, boot, fence, attempt,
                    id = again.id](Result<Reply> reply) {
    if (fence) fence->Unlink();  // opened by now, or never
    Result<RegisteredKv> registered =
        reply.ok() ? DecodeRegisterKV(*reply->envelope) : Result<RegisteredKv>(reply.status());
    const bool fenced = reply.ok() && DecodeFenced(*reply->envelope);
    if (!registered.ok()) {
      Log(LogLevel::kWarn, "could not register registration " + std::to_string(engine_id) +
                               " again: " + registered.status().ToString());
    }
    if (std::optional<uint64_t> unused =
            registrations_.Rebound(engine_id, registered, boot, fenced ? fence : nullptr)) {
      Log(LogLevel::kError,
          "registration " + std::to_string(engine_id) +
              " is unusable on the restarted kvstashd: its configuration changed");
      Unregister(*unused, RequestKind::kUnregisterUnusable);
    }
    if (session != session_) return;
    if (!registered.ok() && MayPass(registered.status().code())) {
      // A daemon just started may take longer than a request's timeout to
      // open the engine's memory; a reply that comes after all is undone.
      if (registered.status().code() == StatusCode::kTimedOut) late_registrations_.insert(id);
      const auto pause = std::min<Clock::duration>(
          kRegisterAgainFirstPause * (1u << std::min(attempt, 5u)), kRegisterAgainLongestPause);
      register_retries_.push_back({engine_id, attempt + 1, Clock::now() + pause});
    }
    if (registering_again_ > 0 && --registering_again_ == 0) Ready();
  };
  again.bytes = EncodeRegisterKV(HeaderOf(again), stale.options, fence ? fence->name() : "");
  again.session = true;
  outbox_.push_front(again.id);
  pending_.Add(std::move(again));
}

void IoLoop::RetryRegistrations() {
  if (!handshaken_) return;
  const Clock::time_point now = Clock::now();
  std::vector<RegistrationTable::Stale> stale;
  for (auto it = register_retries_.begin(); it != register_retries_.end();) {
    if (it->due > now) {
      ++it;
      continue;
    }
    if (stale.empty()) stale = registrations_.StaleFor(boot_);
    for (const RegistrationTable::Stale& one : stale) {
      if (one.engine_id == it->engine_id) SendRegisterAgain(one, boot_, it->attempt);
    }
    it = register_retries_.erase(it);
  }
}

void IoLoop::Unregister(uint64_t daemon_id, RequestKind kind) {
  ClientRequest drop = OwnRequest(kind, [](Result<Reply>) {});
  drop.bytes = EncodeUnregisterKV(HeaderOf(drop), daemon_id);
  drop.session = true;
  outbox_.push_front(drop.id);
  pending_.Add(std::move(drop));
}

void IoLoop::Ready() {
  handshaken_ = true;
  down_why_.clear();
  AttachChannel();
  if (first_hello_) {
    first_hello_->set_value(server_info());
    first_hello_.reset();
  }
}
}  // namespace kvstash::client
