// Attaching, polling, waking, sweeping and routing through the clients'
// shared-memory channels.
#include "frontend_channels.h"

#include <algorithm>

#include "daemon_logger.h"
#include "kvstash/runtime/stage_trace.h"

namespace kvstash::server {

namespace {

constexpr int kMaxRequestsPerDrain = 256;  // then the others' turn, so none starve
constexpr auto kFullLookInterval = std::chrono::milliseconds(10);

}  // namespace

FrontendChannels::FrontendChannels(const config::ServerConfig& config, Service& service,
                                   FrontendStats& stats, std::unique_ptr<Doorbell> doorbell,
                                   Send send)
    : config_(config),
      service_(service),
      stats_(stats),
      doorbell_(std::move(doorbell)),
      send_(std::move(send)) {}

FrontendChannels::~FrontendChannels() = default;

void FrontendChannels::FromSocket(const PeerId& peer) {
  if (channels_.count(peer) == 0) return;
  Wake(peer, Clock::now());
  bool handled = false;
  Drain(peer, &handled);
}

bool FrontendChannels::Rang(bool* handled) {
  // A doorbell says "look at my rings": each ring of the sender's
  // channels is looked at once, and those that held a request are polled
  // from now on (its idle ones stay asleep).
  bool drained = true;
  rang_.clear();
  const int read = doorbell_->Drain(&rang_);
  if (read > 0) Stats::Add(stats_.channel_doorbells);
  std::vector<PeerId> peers;
  if (doorbell_->MayHaveOverflowed(read) && Clock::now() - last_full_look_ >= kFullLookInterval) {
    // Some ringer may not have got through: every ring, once, at most
    // once a tick (a flood costs this, not a look per datagram).
    last_full_look_ = Clock::now();
    for (const auto& [peer, attached] : channels_) peers.push_back(peer);
  } else {
    for (pid_t pid : rang_) {
      auto [first, last] = channels_of_pid_.equal_range(pid);
      for (auto it = first; it != last; ++it) peers.push_back(it->second);
    }
  }
  for (const PeerId& peer : peers) {
    bool found = false;
    if (!Drain(peer, &found)) drained = false;
    if (found) {
      Wake(peer, Clock::now());
      *handled = true;
    }
  }
  return drained;
}

std::optional<proto::Bytes> FrontendChannels::Handle(const Peer& peer, const uint8_t* data,
                                                     size_t size) {
  Service::Handled handled = service_.Accept(peer, data, size);
  if (!handled.attach) return std::move(handled.reply);
  const Result<std::string> attached = Attach(peer, *handled.attach);
  if (!attached.ok()) {
    Stats::Add(stats_.request_errors);
    return proto::ErrorMessage(handled.request_id, attached.status());
  }
  return EncodeAttachChannelReply(handled.request_id, *attached);
}

Result<std::string> FrontendChannels::Attach(const Peer& peer,
                                             const AttachChannelRequest& request) {
  if (config_.shm_channel != config::ShmChannel::kOn) {
    return Status::Unavailable(std::string("kvstashd runs with --shm-channel ") +
                               config::NameOf(config_.shm_channel) +
                               ": requests travel over the socket only");
  }
  if (reading_ring_) {
    return Status::InvalidArgument("AttachChannel must come over the socket, not through a ring");
  }
  const std::string& name = request.shm_name;
  // A channel attached before is replaced: its charge goes back first, so a
  // peer at its bound may still replace its own.
  if (auto before = channels_.find(peer.id); before != channels_.end()) {
    const std::string old = before->second.channel->name();
    Logger()->debug("shared-memory channel {} replaced by {}", old, name);
    Forget(peer.id);
  }
  // Channels of this process whose clients ended since the last sweep are
  // let go first: a process that closes a client and opens another (a
  // readiness probe, a reconnect) is charged for what it holds now, not for
  // what the sweep has not reached yet.
  if (peer.credentials) DetachEnded(peer.credentials->pid);
  PeerBudget::Amounts cost{};
  cost[PeerBudget::kChannels] = 1;
  cost[PeerBudget::kMappings] = 1;
  cost[PeerBudget::kChannelBytes] =
      channel::ValidRingBytes(request.request_ring_bytes) &&
              channel::ValidRingBytes(request.reply_ring_bytes)
          ? channel::SegmentBytes(request.request_ring_bytes, request.reply_ring_bytes)
          : 0;
  Result<PeerBudget::Hold> charged = service_.budget().Charge(peer, cost);
  if (!charged.ok()) {
    Stats::Add(stats_.peer_budget_refusals);
    return Status(charged.status().code(),
                  charged.status().message() + "; this client uses the socket");
  }
  Result<std::unique_ptr<MappedChannel>> opened =
      MappedChannel::Open(peer, name, request.request_ring_bytes, request.reply_ring_bytes);
  if (!opened.ok()) return opened.status();
  const pid_t pid = (*opened)->pid();
  Logger()->debug("shared-memory channel {} attached for client pid {}", name, pid);
  AttachedChannel& attached = channels_[peer.id];
  attached.channel = std::move(*opened);
  attached.charge = std::move(*charged);
  channels_of_pid_.emplace(pid, peer.id);
  Stats::Add(stats_.channels_attached);
  Wake(peer.id, Clock::now());  // its first requests come soon
  return doorbell_ ? doorbell_->path() : std::string();
}

void FrontendChannels::DetachEnded(pid_t pid) {
  std::vector<std::pair<PeerId, std::string>> ended;
  auto [first, last] = channels_of_pid_.equal_range(pid);
  for (auto it = first; it != last; ++it) {
    std::string why = channels_.at(it->second).channel->Ended();
    if (!why.empty()) ended.emplace_back(it->second, std::move(why));
  }
  for (const auto& [peer, why] : ended) Detach(peer, why, false);
}

void FrontendChannels::Forget(const PeerId& peer) {
  auto found = channels_.find(peer);
  if (found == channels_.end()) return;
  auto [first, last] = channels_of_pid_.equal_range(found->second.channel->pid());
  for (auto it = first; it != last; ++it) {
    if (it->second == peer) {
      channels_of_pid_.erase(it);
      break;
    }
  }
  if (found->second.awake) {
    awake_channels_.erase(std::find(awake_channels_.begin(), awake_channels_.end(), peer));
  }
  channels_.erase(found);  // unmaps it and gives its charge back
  Stats::Add(stats_.channels_detached);
}

void FrontendChannels::Detach(const PeerId& peer, const std::string& why, bool tell) {
  auto found = channels_.find(peer);
  if (found == channels_.end()) return;
  const std::string name = found->second.channel->name();
  Forget(peer);
  if (!tell) {
    Logger()->debug("shared-memory channel {} detached: {}", name, why);
    return;
  }
  Logger()->error(
      "shared-memory channel {} detached: {}; this client's requests travel over the "
      "socket from now on",
      name, why);
  send_(peer, EncodeChannelClosed(why));
}

void FrontendChannels::Wake(const PeerId& peer, Clock::time_point now) {
  auto found = channels_.find(peer);
  if (found == channels_.end()) return;
  found->second.last_used = now;
  if (found->second.awake) return;
  found->second.awake = true;
  awake_channels_.push_back(peer);
}

bool FrontendChannels::Drain(const PeerId& peer, bool* handled) {
  for (int n = 0; n < kMaxRequestsPerDrain; ++n) {
    auto found = channels_.find(peer);
    if (found == channels_.end()) return true;
    const uint8_t* data = nullptr;
    uint32_t size = 0;
    std::string why;
    const channel::RingResult popped =
        found->second.channel->PopRequest(&frame_, &data, &size, &why);
    if (popped == channel::RingResult::kEmpty) return true;
    if (popped != channel::RingResult::kOk) {
      Detach(peer, why, true);
      return true;
    }
    *handled = true;
    found->second.last_used = Clock::now();
    Stats::Add(stats_.channel_requests);
    const Peer sender = found->second.channel->peer();  // a copy: handling may end the channel
    reading_ring_ = true;
    std::optional<proto::Bytes> reply = Handle(sender, data, size);
    reading_ring_ = false;
    if (reply) {
      if (service_.trace() != nullptr) {
        MarkStage(service_.trace(), wire::GetEnvelope(reply->data())->request_id(),
                  TraceStage::kReplySent);
      }
      Route(peer, *reply);
    }
  }
  return false;
}

bool FrontendChannels::DrainAwake(bool* handled) {
  bool drained = true;
  const std::vector<PeerId> peers = awake_channels_;  // a copy: handling may detach
  for (const PeerId& peer : peers) drained = Drain(peer, handled) && drained;
  return drained;
}

bool FrontendChannels::Sleeping(bool sleeping) {
  bool waiting = false;
  std::vector<std::pair<PeerId, std::string>> broken;
  for (const PeerId& peer : awake_channels_) {
    Result<bool> ready = channels_.at(peer).channel->SetAwake(!sleeping);
    if (!ready.ok()) {
      broken.emplace_back(peer, ready.status().message());
    } else if (sleeping && *ready) {
      waiting = true;
    }
  }
  for (const auto& [peer, why] : broken) Detach(peer, why, true);
  return waiting;
}

void FrontendChannels::Tick(Clock::time_point now) {
  std::vector<std::pair<PeerId, std::string>> broken;
  // Idle ones sleep: 0 in their awake word, then a last look (the client may
  // have written just before it saw the 0).
  for (size_t i = 0; i < awake_channels_.size();) {
    AttachedChannel& attached = channels_.at(awake_channels_[i]);
    if (now - attached.last_used < kIdle) {
      ++i;
      continue;
    }
    Result<bool> ready = attached.channel->SetAwake(false);
    if (!ready.ok()) {
      broken.emplace_back(awake_channels_[i], ready.status().message());
      ++i;
    } else if (*ready) {
      attached.last_used = now;
      ++i;
    } else {
      attached.awake = false;
      awake_channels_[i] = awake_channels_.back();
      awake_channels_.pop_back();
    }
  }
  for (const auto& [peer, why] : broken) Detach(peer, why, true);
  // A few channels_, round robin, for an end.
  std::vector<std::pair<PeerId, std::string>> ended;
  std::vector<std::pair<PeerId, std::string>> silent;
  const auto timeout = std::chrono::milliseconds(config_.peer_timeout_ms);
  auto it = channels_.upper_bound(sweep_after_);
  std::vector<PeerId> looked;
  for (size_t n = 0; n < std::min(kSweptPerTick, channels_.size()); ++n) {
    if (it == channels_.end()) it = channels_.begin();
    if (!it->second.awake) looked.push_back(it->first);
    std::string why = it->second.channel->Ended();
    if (!why.empty()) {
      ended.emplace_back(it->first, std::move(why));
    } else if (const std::optional<Clock::duration> quiet = service_.SilentFor(it->first, now);
               quiet && *quiet > timeout) {
      silent.emplace_back(it->first, "its connection was silent for more than " +
                                         std::to_string(timeout.count()) +
                                         " ms (--peer-timeout-ms): closed, or its client stopped");
    }
    sweep_after_ = it->first;
    ++it;
  }
  for (const auto& [peer, why] : ended) Detach(peer, why, false);
  for (const auto& [peer, why] : silent) Detach(peer, why, true);
  // And a look into the asleep ones' rings: a wake-up lost anyhow is found
  // within a round of the sweep.
  for (const PeerId& peer : looked) {
    bool handled = false;
    Drain(peer, &handled);
    if (handled) Wake(peer, now);
  }
}

void FrontendChannels::Route(const PeerId& peer, const proto::Bytes& bytes) {
  if (!channels_.empty()) {
    auto found = channels_.find(peer);
    if (found != channels_.end()) {
      std::string why;
      switch (found->second.channel->PushReply(bytes.data(), bytes.size(), &why)) {
        case MappedChannel::Sent::kRing: return;
        case MappedChannel::Sent::kRingDoorbell: send_(peer, proto::Bytes()); return;
        case MappedChannel::Sent::kNotSent: break;
        case MappedChannel::Sent::kCorrupt: Detach(peer, why, true); break;
      }
    }
  }
  send_(peer, bytes);
}

}  // namespace kvstash::server
