// The frontend: the thread that calls Run owns the ROUTER socket, reads
// requests, hands them to the Service, and sends replies — its own and those
// finished by transfer workers (through the reply queue).
#include "kvstash/server/daemon.h"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "backend_factory.h"
#include "daemon_logger.h"
#include "doorbell.h"
#include "ipc_path.h"
#include "kvstash/adaptive_spin.h"
#include "kvstash/endpoint.h"
#include "kvstash/stage_trace.h"
#include "memory_budget.h"
#include "metrics_endpoint.h"
#include "peer_budget.h"
#include "prometheus_text.h"
#include "reply_queue.h"
#include "service.h"
#include "shm_channel.h"

namespace kvstash::server {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kTickInterval = std::chrono::milliseconds(10);  // lease expiry
constexpr auto kDrainTimeout = std::chrono::seconds(30);
constexpr int kMaxRequestsPerWake = 256;  // then send replies, so none starve
constexpr auto kStallSlack =
    std::chrono::milliseconds(50);  // a turn longer than poll + this stalled
// A channel without a request for this long is no longer polled on every
// turn; its client rings the doorbell (or sends a message) for the next.
constexpr auto kChannelIdle = std::chrono::milliseconds(20);
// Channels looked at for an end on each tick: a constant cost per tick,
// whatever the number of channels (4096 are all seen within about 5 s).
constexpr size_t kChannelsSweptPerTick = 8;

// Fixes the pool size (l1_share of MemAvailable, or l1_gb) and refuses one
// that does not fit the machine, before any of it is touched.
Status SizePool(config::ServerConfig& config, const std::string& backend) {
  Result<MemoryFigures> figures = ReadMemoryFigures();
  if (!figures.ok()) return figures.status();
  const uint64_t pool = PoolBytes(config, *figures);
  KVSTASH_RETURN_IF_ERROR(CheckPoolFits(pool, backend, *figures));
  config.l1_gb = double(pool) / double(uint64_t{1} << 30);
  return Status::Ok();
}

}  // namespace

struct Daemon::Impl {
  config::ServerConfig config;
  std::string backend_name;  // the backend chosen (config.backend may say auto)
  ReplyQueue replies;
  std::unique_ptr<Service> service;
  std::unique_ptr<MetricsEndpoint> metrics;  // null unless metrics_port is set
  int stop_fd = -1;

  ~Impl() {
    metrics.reset();   // its threads read the service
    channels.clear();  // their charges go back to the service's budget
    service.reset();   // joins workers before the queue goes
    if (stop_fd >= 0) close(stop_fd);
  }
  Status Serve(zmq::socket_t& router);
  // Returns whether the socket is drained (no message left waiting).
  bool ReceiveRequests(zmq::socket_t& router);
  // The sender's credentials, on ipc sockets only.
  std::optional<PeerCredentials> Credentials(zmq::message_t& frame) const;
  bool ipc = false;
  static void Send(zmq::socket_t& router, const PeerId& peer, const proto::Bytes& bytes);

  // ---- Shared-memory channels (docs/protocol.md "Shared-memory channel") ----
  // Frontend thread only, like the socket. A channel costs the frontend
  // nothing while idle: only awake channels (a request lately, or woken by
  // their process's doorbell or a message on their connection) are polled
  // on each turn; a bounded sweep per tick finds the ended ones.
  struct AttachedChannel {
    std::unique_ptr<ShmChannel> channel;
    PeerBudget::Hold charge;  // its mapping and bytes, on its peer's budget
    bool awake = false;       // listed in awake_channels
    Clock::time_point last_used;
  };
  // Returns the doorbell's path for the reply ("" when there is none).
  Result<std::string> AttachChannel(const Peer& peer, const wire::AttachChannelRequest& request);
  // Unmaps a peer's channel and forgets it everywhere.
  void ForgetChannel(const PeerId& peer);
  // Ends a peer's channel; `tell` sends it ChannelClosed naming `why`.
  void DetachChannel(zmq::socket_t& router, const PeerId& peer, const std::string& why, bool tell);
  // Polls the peer's channel from now on (until it idles).
  void WakeChannel(const PeerId& peer, Clock::time_point now);
  // Reads and handles what waits in the peer's request ring; returns
  // whether it is drained (false: more may wait).
  bool DrainChannel(zmq::socket_t& router, const PeerId& peer, bool* handled);
  bool DrainChannels(zmq::socket_t& router, bool* handled);
  // Before a blocking poll (sleeping) or while polling: writes the awake
  // words of the awake channels (the others hold 0: their clients ring);
  // returns whether a ring holds a request (then do not block).
  bool ChannelsSleeping(zmq::socket_t& router, bool sleeping);
  // Each tick: lets channels idle past kChannelIdle sleep, and looks at a
  // few channels (round robin) for an end: closed by the client, its
  // process exited, or its connection silent past --peer-timeout-ms.
  void CheckChannels(zmq::socket_t& router, Clock::time_point now);
  // A reply to `peer`: through its reply ring when it has one and polls it,
  // otherwise over ZeroMQ.
  void Route(zmq::socket_t& router, const PeerId& peer, const proto::Bytes& bytes);
  std::map<PeerId, AttachedChannel> channels;  // ordered: the sweep resumes after a key
  std::vector<PeerId> awake_channels;
  std::unordered_multimap<pid_t, PeerId> channels_of_pid;  // whom a doorbell wakes
  PeerId sweep_after;                                      // the sweep's place
  Clock::time_point last_full_look;  // every ring looked at after a full doorbell queue
  std::vector<pid_t> rang;           // reused by each doorbell drain
  std::vector<uint64_t> frame;       // one request frame copied out of a ring, 8-aligned
  bool reading_ring = false;         // handling a request read from a ring
  // Shared by all channels; null without channels or when it could not be
  // bound (then clients ring over the socket, as before).
  std::unique_ptr<Doorbell> doorbell;
};

Result<std::unique_ptr<Daemon>> Daemon::Create(const config::ServerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.socket = NormalizeEndpoint(config.socket);  // a plain path is an ipc socket
  impl->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->stop_fd < 0) return Status::Internal("eventfd failed");
  Result<std::unique_ptr<Backend>> backend = CreateBackend(config);
  if (!backend.ok()) return backend.status();
  impl->backend_name = (*backend)->name();  // the chosen one, also under --backend auto
  KVSTASH_RETURN_IF_ERROR(SizePool(impl->config, impl->backend_name));
  Result<std::unique_ptr<Service>> service =
      Service::Create(impl->config, std::move(*backend), impl->replies);
  if (!service.ok()) return service.status();
  impl->service = std::move(*service);
  if (config.metrics_port != 0) {
    const Service* serving = impl->service.get();
    Result<std::unique_ptr<MetricsEndpoint>> metrics =
        MetricsEndpoint::Start(config.metrics_bind, uint16_t(config.metrics_port),
                               [serving] { return PrometheusText(serving->ReadStats()); });
    if (!metrics.ok()) return metrics.status();
    impl->metrics = std::move(*metrics);
    Logger()->info("metrics at http://{}:{}/metrics", config.metrics_bind, config.metrics_port);
  }
  return std::unique_ptr<Daemon>(new Daemon(std::move(impl)));
}

Daemon::Daemon(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Daemon::~Daemon() = default;

void Daemon::RequestStop() {
  const uint64_t one = 1;
  ssize_t written = write(impl_->stop_fd, &one, sizeof(one));
  (void)written;
}

Status Daemon::Run() {
  const std::string path = IpcPath(impl_->config.socket);
  impl_->ipc = !path.empty();
  // Held until this daemon's files are gone: no second daemon binds the
  // path meanwhile, and what a dead one left is removed.
  std::unique_ptr<IpcPathClaim> claim;
  if (!path.empty()) {
    Result<std::unique_ptr<IpcPathClaim>> claimed = ClaimIpcPath(path, path + ".doorbell");
    if (!claimed.ok()) return claimed.status();
    claim = std::move(*claimed);
  }
  Status status;
  try {
    zmq::context_t context(1);
    zmq::socket_t router(context, zmq::socket_type::router);
    router.set(zmq::sockopt::linger, 0);
    router.set(zmq::sockopt::sndhwm, 100000);
    router.set(zmq::sockopt::rcvhwm, 100000);
    // libkvstash keeps one identity across reconnects (registrations belong
    // to it): a reconnecting engine takes its identity over from the old,
    // possibly not yet closed, connection.
    router.set(zmq::sockopt::router_handover, 1);
    // A hard guard against memory exhaustion; messages up to the configured
    // limit get a clear TooLarge reply, far larger ones drop the peer.
    router.set(zmq::sockopt::maxmsgsize,
               int64_t(impl_->config.max_message_mb) * 2 * (1 << 20) + (1 << 20));
    router.bind(impl_->config.socket);
    if (!path.empty() && chmod(path.c_str(), impl_->config.socket_mode) != 0) {
      Logger()->warn("cannot set mode {:o} on {}", impl_->config.socket_mode, path);
    }
    if (!path.empty() && impl_->config.shm_channel == "on") {
      Result<std::unique_ptr<Doorbell>> bell =
          Doorbell::Create(path + ".doorbell", impl_->config.socket_mode);
      if (bell.ok()) {
        impl_->doorbell = std::move(*bell);
      } else {
        Logger()->warn("no doorbell ({}): clients wake this daemon over the socket",
                       bell.status().message());
      }
    }
    Logger()->info("kvstashd serving at {} ({} backend, L1 {:.2f} GiB)", impl_->config.socket,
                   impl_->backend_name, impl_->config.l1_gb);
    status = impl_->Serve(router);
  } catch (const zmq::error_t& e) {
    status = Status::Unavailable("ZeroMQ error on " + impl_->config.socket + ": " + e.what());
  }
  impl_->doorbell.reset();  // removes its path
  if (!path.empty()) unlink(path.c_str());
  claim.reset();  // last: the path is free for the next daemon
  return status;
}

Status Daemon::Impl::Serve(zmq::socket_t& router) {
  service->SetChannelAttacher([this](const Peer& peer, const wire::AttachChannelRequest& request) {
    return AttachChannel(peer, request);
  });
  bool stopping = false;
  Clock::time_point drain_deadline;
  AdaptiveSpin spin(std::chrono::microseconds(config.busy_poll_us));
  Clock::time_point last_tick;
  bool drained = true;
  // Between two marks the loop waits at most one poll interval plus a little
  // work; more means the daemon itself stalled (SIGSTOP, a slow request, an
  // overloaded machine) and engines could not be heard meanwhile: that time
  // is nobody's silence. Marked after each poll and before each tick.
  Clock::time_point last_mark = Clock::now();
  const auto mark = [&] {
    const Clock::time_point now = Clock::now();
    if (now - last_mark > kPollInterval + kStallSlack)
      service->ForgiveStall(now - last_mark - kPollInterval);
    last_mark = now;
  };
  for (;;) {
    zmq::pollitem_t items[] = {{router.handle(), 0, ZMQ_POLLIN, 0},
                               {nullptr, replies.wake_fd(), ZMQ_POLLIN, 0},
                               {nullptr, stop_fd, ZMQ_POLLIN, 0},
                               {nullptr, doorbell ? doorbell->fd() : -1, ZMQ_POLLIN, 0}};
    // Adaptive spinning (docs/deployment.md "Spinning"): no sleep for a
    // window after the last message, nor while copies are in flight (then up
    // to AdaptiveSpin::kInFlightWindows windows), so that neither the next
    // request nor a lane's reply waits for this thread to wake up. Then it
    // sleeps, and an idle daemon uses no CPU.
    const bool busy = spin.Spinning(Clock::now(), service->deferred_in_flight() > 0);
    // A sleeping frontend is woken by the reply queue's eventfd; a spinning
    // one reads the queue's count, and lanes skip the write.
    const bool replies_waiting = replies.Sleeping(!busy);
    // Attached rings are polled like the socket: their awake words say
    // whether clients may write to them without ringing a doorbell.
    const bool ring_waiting = !awake_channels.empty() && ChannelsSleeping(router, !busy);
    const bool block = !busy && !replies_waiting && !ring_waiting;
    if (zmq::poll(items, doorbell ? 4 : 3, block ? kPollInterval : std::chrono::milliseconds(0)) >
        0) {
      spin.Activity(Clock::now());
    } else if (!block && !ring_waiting) {
      // Nothing yet: give the core to any thread waiting for it (the
      // copies), so that spinning never slows the work it waits for.
      sched_yield();
    }
    if (block) replies.Sleeping(false);
    mark();
    if (items[0].revents & ZMQ_POLLIN) drained = ReceiveRequests(router);
    // A doorbell says "look at my rings": each ring of the sender's
    // channels is looked at once, and those that held a request are polled
    // from now on (its idle ones stay asleep).
    if (items[3].revents & ZMQ_POLLIN) {
      rang.clear();
      const int read = doorbell->Drain(&rang);
      if (read > 0) service->stats().channel_doorbells.fetch_add(1);
      std::vector<PeerId> peers;
      if (doorbell->MayHaveOverflowed(read) && Clock::now() - last_full_look >= kTickInterval) {
        // Some ringer may not have got through: every ring, once, at most
        // once a tick (a flood costs this, not a look per datagram).
        last_full_look = Clock::now();
        for (const auto& [peer, attached] : channels) peers.push_back(peer);
      } else {
        for (pid_t pid : rang) {
          auto [first, last] = channels_of_pid.equal_range(pid);
          for (auto it = first; it != last; ++it) peers.push_back(it->second);
        }
      }
      for (const PeerId& peer : peers) {
        bool handled = false;
        if (!DrainChannel(router, peer, &handled)) drained = false;
        if (handled) {
          WakeChannel(peer, Clock::now());
          spin.Activity(Clock::now());
        }
      }
    }
    if (!awake_channels.empty()) {
      bool handled = false;
      if (!DrainChannels(router, &handled)) drained = false;
      if (handled) spin.Activity(Clock::now());
    }
    if ((items[1].revents & ZMQ_POLLIN) || replies.pending()) {
      for (const OutgoingReply& reply : replies.TakeAll()) {
        MarkStage(service->trace(), reply.request_id, TraceStage::kReplySent);
        Route(router, reply.peer, reply.bytes);
      }
      spin.Activity(Clock::now());
    }
    if (const Clock::time_point now = Clock::now(); now - last_tick >= kTickInterval) {
      mark();
      service->Tick(drained);
      if (!channels.empty()) CheckChannels(router, now);
      last_tick = now;
    }
    if ((items[2].revents & ZMQ_POLLIN) && !stopping) {
      Logger()->info("stopping: answering {} requests in flight", service->deferred_in_flight());
      service->BeginShutdown();
      // Tell every client now, so that none waits out its timeout on
      // requests this daemon will not answer (they fail with Unavailable).
      const proto::Bytes goodbye = Service::GoodbyeMessage("kvstashd is stopping");
      for (const PeerId& peer : service->RecentPeers()) Send(router, peer, goodbye);
      router.set(zmq::sockopt::linger, 200);  // deliver them before the socket closes
      stopping = true;
      drain_deadline = Clock::now() + kDrainTimeout;
    }
    if (stopping && service->deferred_in_flight() == 0) break;
    if (stopping && Clock::now() > drain_deadline) {
      return Status::DeviceError(std::to_string(service->deferred_in_flight()) +
                                 " requests still in flight after the drain timeout");
    }
  }
  Logger()->info("stopped");
  return Status::Ok();
}

bool Daemon::Impl::ReceiveRequests(zmq::socket_t& router) {
  std::vector<zmq::message_t> frames;  // reused: no allocation per message
  for (int n = 0; n < kMaxRequestsPerWake; ++n) {
    frames.clear();
    if (!zmq::recv_multipart(router, std::back_inserter(frames), zmq::recv_flags::dontwait))
      return true;
    if (frames.empty()) continue;
    const PeerId peer = frames[0].to_string();
    // What the peer wrote to its ring before this message comes first; an
    // empty message is its doorbell, nothing more (from a peer without a
    // channel it is malformed, as ever).
    if (!channels.empty() && channels.count(peer) != 0) {
      bool handled = false;
      WakeChannel(peer, Clock::now());
      DrainChannel(router, peer, &handled);
      if (frames.size() == 2 && frames[1].size() == 0) continue;
    }
    if (frames.size() != 2) {
      Send(router, peer,
           proto::ErrorMessage(0,
                               Status::Malformed("expected one frame per message, got " +
                                                 std::to_string(frames.size() - 1) +
                                                 " (use a DEALER socket and send one envelope)")));
      service->stats().request_errors.fetch_add(1);
      continue;
    }
    // FlatBuffers reads scalars in place and ZeroMQ does not align message
    // data (small messages live inside zmq_msg_t): copy a misaligned one.
    const uint8_t* data = frames[1].data<uint8_t>();
    std::vector<uint64_t> aligned;
    if (reinterpret_cast<uintptr_t>(data) % alignof(uint64_t) != 0) {
      aligned.resize((frames[1].size() + 7) / 8);
      std::memcpy(aligned.data(), data, frames[1].size());
      data = reinterpret_cast<const uint8_t*>(aligned.data());
    }
    const Peer sender{peer, Credentials(frames[1])};
    std::optional<proto::Bytes> reply = service->Handle(sender, data, frames[1].size());
    if (reply) {
      if (service->trace() != nullptr) {
        MarkStage(service->trace(), wire::GetEnvelope(reply->data())->request_id(),
                  TraceStage::kReplySent);
      }
      Route(router, peer, *reply);
    }
  }
  return false;  // more may be waiting
}

Result<std::string> Daemon::Impl::AttachChannel(const Peer& peer,
                                                const wire::AttachChannelRequest& request) {
  if (config.shm_channel != "on") {
    return Status::Unavailable("kvstashd runs with --shm-channel " + config.shm_channel +
                               ": requests travel over the socket only");
  }
  if (reading_ring) {
    return Status::InvalidArgument("AttachChannel must come over the socket, not through a ring");
  }
  const std::string name = request.shm_name() ? request.shm_name()->str() : std::string();
  // A channel attached before is replaced: its charge goes back first, so a
  // peer at its bound may still replace its own.
  if (auto before = channels.find(peer.id); before != channels.end()) {
    const std::string old = before->second.channel->name();
    Logger()->debug("shared-memory channel {} replaced by {}", old, name);
    ForgetChannel(peer.id);
  }
  PeerBudget::Amounts cost{};
  cost[PeerBudget::kChannels] = 1;
  cost[PeerBudget::kMappings] = 1;
  cost[PeerBudget::kChannelBytes] =
      channel::ValidRingBytes(request.request_ring_bytes()) &&
              channel::ValidRingBytes(request.reply_ring_bytes())
          ? channel::SegmentBytes(request.request_ring_bytes(), request.reply_ring_bytes())
          : 0;
  Result<PeerBudget::Hold> charged = service->budget().Charge(peer, cost);
  if (!charged.ok()) {
    service->stats().peer_budget_refusals.fetch_add(1);
    return Status(charged.status().code(),
                  charged.status().message() + "; this client uses the socket");
  }
  Result<std::unique_ptr<ShmChannel>> opened =
      ShmChannel::Open(peer, name, request.request_ring_bytes(), request.reply_ring_bytes());
  if (!opened.ok()) return opened.status();
  const pid_t pid = (*opened)->pid();
  Logger()->debug("shared-memory channel {} attached for client pid {}", name, pid);
  AttachedChannel& attached = channels[peer.id];
  attached.channel = std::move(*opened);
  attached.charge = std::move(*charged);
  channels_of_pid.emplace(pid, peer.id);
  service->stats().channels_attached.fetch_add(1);
  WakeChannel(peer.id, Clock::now());  // its first requests come soon
  return doorbell ? doorbell->path() : std::string();
}

void Daemon::Impl::ForgetChannel(const PeerId& peer) {
  auto found = channels.find(peer);
  if (found == channels.end()) return;
  auto [first, last] = channels_of_pid.equal_range(found->second.channel->pid());
  for (auto it = first; it != last; ++it) {
    if (it->second == peer) {
      channels_of_pid.erase(it);
      break;
    }
  }
  if (found->second.awake) {
    awake_channels.erase(std::find(awake_channels.begin(), awake_channels.end(), peer));
  }
  channels.erase(found);  // unmaps it and gives its charge back
  service->stats().channels_detached.fetch_add(1);
}

void Daemon::Impl::DetachChannel(zmq::socket_t& router, const PeerId& peer, const std::string& why,
                                 bool tell) {
  auto found = channels.find(peer);
  if (found == channels.end()) return;
  const std::string name = found->second.channel->name();
  ForgetChannel(peer);
  if (!tell) {
    Logger()->debug("shared-memory channel {} detached: {}", name, why);
    return;
  }
  Logger()->error(
      "shared-memory channel {} detached: {}; this client's requests travel over the "
      "socket from now on",
      name, why);
  flatbuffers::FlatBufferBuilder fbb(64 + why.size());
  auto body = wire::CreateChannelClosedDirect(fbb, why.c_str());
  Send(router, peer, proto::Finish(fbb, 0, wire::Body::ChannelClosed, body.Union()));
}

void Daemon::Impl::WakeChannel(const PeerId& peer, Clock::time_point now) {
  auto found = channels.find(peer);
  if (found == channels.end()) return;
  found->second.last_used = now;
  if (found->second.awake) return;
  found->second.awake = true;
  awake_channels.push_back(peer);
}

bool Daemon::Impl::DrainChannel(zmq::socket_t& router, const PeerId& peer, bool* handled) {
  for (int n = 0; n < kMaxRequestsPerWake; ++n) {
    auto found = channels.find(peer);
    if (found == channels.end()) return true;
    const uint8_t* data = nullptr;
    uint32_t size = 0;
    std::string why;
    const channel::RingResult popped =
        found->second.channel->PopRequest(&frame, &data, &size, &why);
    if (popped == channel::RingResult::kEmpty) return true;
    if (popped != channel::RingResult::kOk) {
      DetachChannel(router, peer, why, true);
      return true;
    }
    *handled = true;
    found->second.last_used = Clock::now();
    service->stats().channel_requests.fetch_add(1);
    const Peer sender = found->second.channel->peer();  // a copy: handling may end the channel
    reading_ring = true;
    std::optional<proto::Bytes> reply = service->Handle(sender, data, size);
    reading_ring = false;
    if (reply) {
      if (service->trace() != nullptr) {
        MarkStage(service->trace(), wire::GetEnvelope(reply->data())->request_id(),
                  TraceStage::kReplySent);
      }
      Route(router, peer, *reply);
    }
  }
  return false;
}

bool Daemon::Impl::DrainChannels(zmq::socket_t& router, bool* handled) {
  bool drained = true;
  const std::vector<PeerId> peers = awake_channels;  // a copy: handling may detach
  for (const PeerId& peer : peers) drained = DrainChannel(router, peer, handled) && drained;
  return drained;
}

bool Daemon::Impl::ChannelsSleeping(zmq::socket_t& router, bool sleeping) {
  bool waiting = false;
  std::vector<std::pair<PeerId, std::string>> broken;
  for (const PeerId& peer : awake_channels) {
    Result<bool> ready = channels.at(peer).channel->SetAwake(!sleeping);
    if (!ready.ok()) {
      broken.emplace_back(peer, ready.status().message());
    } else if (sleeping && *ready) {
      waiting = true;
    }
  }
  for (const auto& [peer, why] : broken) DetachChannel(router, peer, why, true);
  return waiting;
}

void Daemon::Impl::CheckChannels(zmq::socket_t& router, Clock::time_point now) {
  std::vector<std::pair<PeerId, std::string>> broken;
  // Idle ones sleep: 0 in their awake word, then a last look (the client may
  // have written just before it saw the 0).
  for (size_t i = 0; i < awake_channels.size();) {
    AttachedChannel& attached = channels.at(awake_channels[i]);
    if (now - attached.last_used < kChannelIdle) {
      ++i;
      continue;
    }
    Result<bool> ready = attached.channel->SetAwake(false);
    if (!ready.ok()) {
      broken.emplace_back(awake_channels[i], ready.status().message());
      ++i;
    } else if (*ready) {
      attached.last_used = now;
      ++i;
    } else {
      attached.awake = false;
      awake_channels[i] = awake_channels.back();
      awake_channels.pop_back();
    }
  }
  for (const auto& [peer, why] : broken) DetachChannel(router, peer, why, true);
  // A few channels, round robin, for an end.
  std::vector<std::pair<PeerId, std::string>> ended;
  std::vector<std::pair<PeerId, std::string>> silent;
  const auto timeout = std::chrono::milliseconds(config.peer_timeout_ms);
  auto it = channels.upper_bound(sweep_after);
  std::vector<PeerId> looked;
  for (size_t n = 0; n < std::min(kChannelsSweptPerTick, channels.size()); ++n) {
    if (it == channels.end()) it = channels.begin();
    if (!it->second.awake) looked.push_back(it->first);
    std::string why = it->second.channel->Ended();
    if (!why.empty()) {
      ended.emplace_back(it->first, std::move(why));
    } else if (const std::optional<Clock::duration> quiet = service->SilentFor(it->first, now);
               quiet && *quiet > timeout) {
      silent.emplace_back(it->first, "its connection was silent for more than " +
                                         std::to_string(timeout.count()) +
                                         " ms (--peer-timeout-ms): closed, or its client stopped");
    }
    sweep_after = it->first;
    ++it;
  }
  for (const auto& [peer, why] : ended) DetachChannel(router, peer, why, false);
  for (const auto& [peer, why] : silent) DetachChannel(router, peer, why, true);
  // And a look into the asleep ones' rings: a wake-up lost anyhow is found
  // within a round of the sweep.
  for (const PeerId& peer : looked) {
    bool handled = false;
    DrainChannel(router, peer, &handled);
    if (handled) WakeChannel(peer, now);
  }
}

void Daemon::Impl::Route(zmq::socket_t& router, const PeerId& peer, const proto::Bytes& bytes) {
  if (!channels.empty()) {
    auto found = channels.find(peer);
    if (found != channels.end()) {
      std::string why;
      switch (found->second.channel->PushReply(bytes.data(), bytes.size(), &why)) {
        case ShmChannel::Sent::kRing: return;
        case ShmChannel::Sent::kRingDoorbell: Send(router, peer, proto::Bytes()); return;
        case ShmChannel::Sent::kNotSent: break;
        case ShmChannel::Sent::kCorrupt: DetachChannel(router, peer, why, true); break;
      }
    }
  }
  Send(router, peer, bytes);
}

std::optional<PeerCredentials> Daemon::Impl::Credentials(zmq::message_t& frame) const {
  // libzmq reads SO_PEERCRED when an ipc connection is accepted and exposes
  // it as "Peer-Address" = "...:uid:gid:pid" (4.3); over tcp it is an IP
  // address and names nobody's credentials.
  if (!ipc) return std::nullopt;
  const char* address = zmq_msg_gets(frame.handle(), "Peer-Address");
  if (address == nullptr) return std::nullopt;
  return ParsePeerAddress(address);
}

void Daemon::Impl::Send(zmq::socket_t& router, const PeerId& peer, const proto::Bytes& bytes) {
  try {
    router.send(zmq::buffer(peer), zmq::send_flags::sndmore | zmq::send_flags::dontwait);
    router.send(zmq::buffer(bytes), zmq::send_flags::dontwait);
  } catch (const zmq::error_t& e) {
    // A peer that went away cannot be answered; everyone else still is.
    Logger()->debug("reply dropped: {}", e.what());
  }
}

}  // namespace kvstash::server
