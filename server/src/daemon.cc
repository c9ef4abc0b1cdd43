// The frontend: the thread that calls Run owns the ROUTER socket, reads
// requests, hands them to the Service, and sends replies — its own and those
// finished by transfer workers (through the reply queue).
#include "kvstash/server/daemon.h"

#include <sched.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <unordered_map>
#include <vector>

#include <zmq.hpp>
#include <zmq_addon.hpp>

#include "daemon_logger.h"
#include "doorbell.h"
#include "frontend_channels.h"
#include "ipc_path.h"
#include "kvstash/backends/backend_factory.h"
#include "kvstash/endpoint.h"
#include "kvstash/runtime/adaptive_spin.h"
#include "kvstash/runtime/stage_trace.h"
#include "memory_budget.h"
#include "metrics_endpoint.h"
#include "prometheus_text.h"
#include "reply_queue.h"
#include "service.h"

namespace kvstash::server {

namespace {

constexpr auto kPollInterval = std::chrono::milliseconds(100);
constexpr auto kTickInterval = std::chrono::milliseconds(10);  // lease expiry
constexpr auto kDrainTimeout = std::chrono::seconds(30);
constexpr int kMaxRequestsPerWake = 256;  // then send replies, so none starve
constexpr auto kStallSlack =
    std::chrono::milliseconds(50);  // a turn longer than poll + this stalled
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

// CPU time of the calling thread: what spinning costs, whatever else runs.
std::chrono::nanoseconds ThreadCpu() {
  timespec now{};
  clock_gettime(CLOCK_THREAD_CPUTIME_ID, &now);
  return std::chrono::seconds(now.tv_sec) + std::chrono::nanoseconds(now.tv_nsec);
}

}  // namespace

struct Daemon::Impl {
  config::ServerConfig config;
  std::string backend_name;  // the backend chosen (config.backend may say auto)
  ReplyQueue replies;
  // The frontend's counters: before the service, whose stats read them.
  FrontendStats frontend_stats;
  std::unique_ptr<Service> service;
  std::unique_ptr<MetricsEndpoint> metrics;  // null unless metrics_port is set
  int stop_fd = -1;

  ~Impl() {
    metrics.reset();   // its threads read the service
    channels.reset();  // their charges go back to the service's budget
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

  // The clients' shared-memory channels and the doorbell, while serving;
  // every reply is routed through it.
  std::unique_ptr<FrontendChannels> channels;
};

Result<std::unique_ptr<Daemon>> Daemon::Create(const config::ServerConfig& config) {
  auto impl = std::make_unique<Impl>();
  impl->config = config;
  impl->config.socket = NormalizeEndpoint(config.socket);  // a plain path is an ipc socket
  impl->stop_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (impl->stop_fd < 0) return Status::Internal("eventfd failed");
  Result<std::unique_ptr<Backend>> backend = backends::CreateBackend(config);
  if (!backend.ok()) return backend.status();
  impl->backend_name = (*backend)->name();  // the chosen one, also under --backend auto
  KVSTASH_RETURN_IF_ERROR(SizePool(impl->config, impl->backend_name));
  Result<std::unique_ptr<Service>> service =
      Service::Create(impl->config, std::move(*backend), impl->replies);
  if (!service.ok()) return service.status();
  impl->service = std::move(*service);
  impl->service->stats().CountFrontend(&impl->frontend_stats);
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
    std::unique_ptr<Doorbell> doorbell;
    if (!path.empty() && impl_->config.shm_channel == config::ShmChannel::kOn) {
      Result<std::unique_ptr<Doorbell>> bell =
          Doorbell::Create(path + ".doorbell", impl_->config.socket_mode);
      if (bell.ok()) {
        doorbell = std::move(*bell);
      } else {
        Logger()->warn("no doorbell ({}): clients wake this daemon over the socket",
                       bell.status().message());
      }
    }
    impl_->channels = std::make_unique<FrontendChannels>(
        impl_->config, *impl_->service, impl_->frontend_stats, std::move(doorbell),
        [&router](const PeerId& peer, const proto::Bytes& bytes) {
          Impl::Send(router, peer, bytes);
        });
    Logger()->info("kvstashd serving at {} ({} backend, L1 {:.2f} GiB)", impl_->config.socket,
                   impl_->backend_name, impl_->config.l1_gb);
    status = impl_->Serve(router);
    impl_->channels.reset();  // unmaps them, removes the doorbell's path
  } catch (const zmq::error_t& e) {
    status = Status::Unavailable("ZeroMQ error on " + impl_->config.socket + ": " + e.what());
  }
  impl_->channels.reset();
  if (!path.empty()) unlink(path.c_str());
  claim.reset();  // last: the path is free for the next daemon
  return status;
}

Status Daemon::Impl::Serve(zmq::socket_t& router) {
  const int doorbell_fd = channels->doorbell_fd();
  bool stopping = false;
  bool goodbye_due = false;  // stopping, and the copies have not ended yet
  Clock::time_point stop_began;
  Clock::time_point drain_deadline;
  AdaptiveSpin spin(std::chrono::microseconds(config.busy_poll_us));
  Clock::time_point last_tick;
  bool drained = true;
  // Between two marks the loop waits at most one poll interval plus a little
  // work; more means the daemon itself stalled (SIGSTOP, a slow request, an
  // overloaded machine) and engines could not be heard meanwhile: that time
  // is nobody's silence. Marked after each poll and before each tick.
  Clock::time_point last_mark = Clock::now();
  // CPU time of spinning that found nothing, not yet in frontend_spin_us.
  std::chrono::nanoseconds spun{};
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
                               {nullptr, doorbell_fd, ZMQ_POLLIN, 0}};
    // Adaptive spinning (docs/deployment.md "Spinning"): no sleep for a
    // window after the last message, nor while copies are in flight (then up
    // to AdaptiveSpin::kInFlightWindows windows), so that neither the next
    // request nor a lane's reply waits for this thread to wake up. Then it
    // sleeps, and an idle daemon uses no CPU.
    // A store waiting for its engine's gate is no copy in flight: its gate
    // may stay closed until the deadline, and the lane watches it.
    const bool busy = spin.Spinning(Clock::now(), service->replies_due() > 0);
    // A sleeping frontend is woken by the reply queue's eventfd; a spinning
    // one reads the queue's count, and lanes skip the write.
    const bool replies_waiting = replies.Sleeping(!busy);
    // Attached rings are polled like the socket: their awake words say
    // whether clients may write to them without ringing a doorbell.
    const bool ring_waiting = channels->any_awake() && channels->Sleeping(!busy);
    const bool block = !busy && !replies_waiting && !ring_waiting;
    const std::chrono::nanoseconds cpu_before = block ? std::chrono::nanoseconds() : ThreadCpu();
    if (zmq::poll(items, doorbell_fd >= 0 ? 4 : 3,
                  block ? kPollInterval : std::chrono::milliseconds(0)) > 0) {
      spin.Activity(Clock::now());
    } else if (!block && !ring_waiting) {
      // Nothing yet: give the core to any thread waiting for it (the
      // copies), so that spinning never slows the work it waits for.
      sched_yield();
      spun += ThreadCpu() - cpu_before;
      if (spun >= std::chrono::microseconds(1)) {
        const auto us = std::chrono::duration_cast<std::chrono::microseconds>(spun);
        Stats::Add(service->stats().frontend_spin_us, uint64_t(us.count()));
        spun -= us;
      }
    }
    if (block) replies.Sleeping(false);
    mark();
    if (items[0].revents & ZMQ_POLLIN) drained = ReceiveRequests(router);
    if (items[3].revents & ZMQ_POLLIN) {
      bool handled = false;
      if (!channels->Rang(&handled)) drained = false;
      if (handled) spin.Activity(Clock::now());
    }
    if (channels->any_awake()) {
      bool handled = false;
      if (!channels->DrainAwake(&handled)) drained = false;
      if (handled) spin.Activity(Clock::now());
    }
    if ((items[1].revents & ZMQ_POLLIN) || replies.pending()) {
      for (const OutgoingReply& reply : replies.TakeAll()) {
        MarkStage(service->trace(), reply.request_id, TraceStage::kReplySent);
        channels->Route(reply.peer, reply.bytes);
      }
      spin.Activity(Clock::now());
    }
    if (const Clock::time_point now = Clock::now(); now - last_tick >= kTickInterval) {
      mark();
      service->Tick(drained);
      if (!channels->empty()) channels->Tick(now);
      last_tick = now;
    }
    if ((items[2].revents & ZMQ_POLLIN) && !stopping) {
      Logger()->info("stopping: answering {} requests in flight", service->deferred_in_flight());
      // No copy unit starts from now on: those in flight end at their next
      // unit, and their chunks are answered Failed (Unavailable).
      service->BeginShutdown();
      stopping = true;
      goodbye_due = true;
      stop_began = Clock::now();
      drain_deadline = stop_began + kDrainTimeout;
    }
    if (goodbye_due && service->copies_in_flight() == 0) {
      // Only once no copy can write an engine's blocks any more (the fence
      // of docs/protocol.md): a client told Goodbye fails its requests at
      // once and its engine reuses their blocks. Sent now, so that none
      // waits out its timeout on requests this daemon will not answer.
      const proto::Bytes goodbye = EncodeGoodbye("kvstashd is stopping");
      for (const PeerId& peer : service->RecentPeers()) Send(router, peer, goodbye);
      router.set(zmq::sockopt::linger, 200);  // deliver them before the socket closes
      goodbye_due = false;
      Logger()->info(
          "copies stopped {} us after the stop signal; said goodbye",
          std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - stop_began).count());
    }
    if (stopping && !goodbye_due && service->deferred_in_flight() == 0) break;
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
    if (!channels->empty() && channels->Has(peer)) {
      channels->FromSocket(peer);
      if (frames.size() == 2 && frames[1].size() == 0) continue;
    }
    if (frames.size() != 2) {
      Send(router, peer,
           proto::ErrorMessage(0,
                               Status::Malformed("expected one frame per message, got " +
                                                 std::to_string(frames.size() - 1) +
                                                 " (use a DEALER socket and send one envelope)")));
      Stats::Add(frontend_stats.request_errors);
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
    std::optional<proto::Bytes> reply = channels->Handle(sender, data, frames[1].size());
    if (reply) {
      if (service->trace() != nullptr) {
        MarkStage(service->trace(), wire::GetEnvelope(reply->data())->request_id(),
                  TraceStage::kReplySent);
      }
      channels->Route(peer, *reply);
    }
  }
  return false;  // more may be waiting
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
