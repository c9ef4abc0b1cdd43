// Which way requests and replies go between the socket and the channel.
#include "channel_route.h"

#include <utility>

namespace kvstash::client {

ChannelRoute::ChannelRoute(bool wanted, std::string endpoint, uint64_t ring_bytes, Log log,
                           OnAttached on_attached)
    : wanted_(wanted),
      endpoint_(std::move(endpoint)),
      ring_bytes_(ring_bytes),
      log_(std::move(log)),
      on_attached_(std::move(on_attached)) {}

const ClientChannel* ChannelRoute::Begin() {
  if (!wanted_ || channel_ || endpoint_.rfind("ipc://", 0) != 0) return nullptr;
  Result<std::unique_ptr<ClientChannel>> created = ClientChannel::Create(ring_bytes_);
  if (!created.ok()) {
    log_(LogLevel::kWarn, "no shared-memory channel (" + created.status().message() +
                              "): requests travel over the socket");
    return nullptr;
  }
  channel_ = std::move(*created);
  return channel_.get();
}

void ChannelRoute::Attached(const ClientChannel* attaching, const Result<Reply>& reply) {
  if (channel_.get() != attaching) return;  // dropped meanwhile (the session ended)
  channel_->Unlink();                       // mapped by the daemon, or never will be
  if (!reply.ok()) {
    log_(LogLevel::kWarn, "kvstashd at " + endpoint_ + " attached no shared-memory channel: " +
                              reply.status().message() + "; requests travel over the socket");
    dropped_ = std::move(channel_);
    return;
  }
  const wire::AttachChannelReply* attached = reply->envelope->body_as_AttachChannelReply();
  if (attached != nullptr && attached->doorbell() != nullptr) {
    if (Status rung = channel_->OpenDoorbell(attached->doorbell()->str()); !rung.ok()) {
      log_(LogLevel::kWarn,
           "no doorbell (" + rung.message() + "): a sleeping kvstashd is woken over the socket");
    }
  }
  ready_ = true;
  on_attached_(true);
  log_(LogLevel::kDebug, "shared-memory channel " + channel_->name() + " attached");
}

void ChannelRoute::Drop(const std::string& why) {
  if (!channel_) return;
  if (ready_) {
    log_(LogLevel::kDebug, "shared-memory channel " + channel_->name() + " dropped: " + why);
  }
  ready_ = false;
  wake_wanted_ = false;
  channel_->MarkClosed();
  dropped_ = std::move(channel_);
  on_attached_(false);
}

bool ChannelRoute::Push(const proto::Bytes& bytes) {
  if (!ready_) return false;
  // The ring when the daemon polls it; otherwise the socket, whose message
  // wakes it (and it reads the ring before that message).
  switch (channel_->Push(bytes)) {
    case ClientChannel::Sent::kRing: return true;
    case ClientChannel::Sent::kRingDoorbell: wake_wanted_ = true; return true;
    case ClientChannel::Sent::kNotSent: return false;
    case ClientChannel::Sent::kCorrupt:
      Drop("kvstashd's head of the request ring is impossible");
      return false;
  }
  return false;
}

bool ChannelRoute::WakeDaemon() {
  if (!wake_wanted_) return true;
  // One byte to the daemon's doorbell socket (one kernel wake-up of its
  // frontend). A full pipe needs none: the daemon reads the ring before
  // each message of ours.
  wake_wanted_ = false;
  return ready_ && channel_->RingDoorbell();
}

bool ChannelRoute::BeforePoll(bool sleeping) {
  if (!ready_) return false;
  if (!sleeping) {
    channel_->SetAwake(true);
    return false;
  }
  // Say "asleep", then look once more.
  return channel_->SetAwake(false);
}

void ChannelRoute::Receive(const std::function<void(const void* data, size_t size)>& handle) {
  for (int n = 0; n < 4096 && ready_; ++n) {
    const uint8_t* data = nullptr;
    uint32_t size = 0;
    // The frame lives in the channel's buffer; a handler that drops the
    // channel leaves it in dropped_ until the next FreeDropped.
    const channel::RingResult popped = channel_->Pop(&data, &size);
    if (popped == channel::RingResult::kEmpty) return;
    if (popped != channel::RingResult::kOk) {
      Drop("kvstashd's reply ring holds an impossible frame");
      return;
    }
    handle(data, size);
  }
}

}  // namespace kvstash::client
