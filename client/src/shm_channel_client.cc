// Creating the channel segment, and routing requests and replies between it
// and the socket.
#include "shm_channel_client.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "decode.h"
#include "shm_name.h"

namespace kvstash::client {

ClientChannel::ClientChannel(bool wanted, std::string endpoint, uint64_t ring_bytes, Log log,
                             OnAttached on_attached)
    : wanted_(wanted),
      endpoint_(std::move(endpoint)),
      ring_bytes_(ring_bytes),
      log_(std::move(log)),
      on_attached_(std::move(on_attached)) {}

Result<std::unique_ptr<ClientChannel::Segment>> ClientChannel::Create(uint64_t ring_bytes) {
  if (!channel::ValidRingBytes(ring_bytes)) {
    return Status::InvalidArgument(
        "channel ring of " + std::to_string(ring_bytes) + " bytes: a power of two from " +
        std::to_string(channel::kMinRingBytes) + " to " + std::to_string(channel::kMaxRingBytes));
  }
  auto ch = std::make_unique<Segment>();
  ch->name = FreshShmName("channel");
  ch->bytes = channel::SegmentBytes(ring_bytes, ring_bytes);
  // 0660 with the creator's primary group, as host KV memory and completion
  // boards (docs/deployment.md): a daemon of another uid opens it through
  // the group. The name lives only until the attach is answered.
  constexpr mode_t kMode = 0660;
  const int fd = shm_open(ch->name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, kMode);
  if (fd < 0) {
    return Status::Unavailable("cannot create channel " + ch->name + ": " + std::strerror(errno));
  }
  ch->linked = true;
  if (fchmod(fd, kMode) != 0 || ftruncate(fd, off_t(ch->bytes)) != 0) {
    const int error = errno;
    close(fd);
    return Status::Exhausted("cannot size channel " + ch->name + " to " +
                             std::to_string(ch->bytes) + " bytes: " + std::strerror(error));
  }
  void* base = mmap(nullptr, ch->bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return Status::Exhausted("cannot map channel " + ch->name + ": " + std::strerror(error));
  }
  ch->base = static_cast<uint8_t*>(base);
  // A fresh object reads as zeros: positions 0, nobody awake.
  channel::SegmentHeader header{};
  header.magic = channel::kMagic;
  header.version = channel::kVersion;
  header.request_ring_bytes = ring_bytes;
  header.reply_ring_bytes = ring_bytes;
  std::memcpy(ch->base, &header, sizeof(header));
  ch->requests = channel::RequestRing(ch->base, ring_bytes);
  ch->replies = channel::ReplyRing(ch->base, ring_bytes, ring_bytes);
  ch->frame.resize(channel::MaxFrame(ring_bytes) / 8 + 1);
  return ch;
}

ClientChannel::Segment::~Segment() {
  if (doorbell_fd >= 0) close(doorbell_fd);
  if (base != nullptr) {
    MarkClosed();
    munmap(base, bytes);
  }
  Unlink();
}

// This side stops using the segment: client_closed (the daemon detaches it
// at its next check) and "asleep" on the reply ring, so that the daemon
// answers over the socket meanwhile.
void ClientChannel::Segment::MarkClosed() {
  channel::StoreWord32(replies.awake_word(), 0);
  awake = false;
  channel::StoreWord32(base + offsetof(channel::SegmentHeader, client_closed), 1);
}

void ClientChannel::Segment::Unlink() {
  if (!linked) return;
  shm_unlink(name.c_str());
  linked = false;
}

Status ClientChannel::OpenDoorbell(Segment& segment, const std::string& path) {
  sockaddr_un address{};
  if (path.empty() || path.size() >= sizeof(address.sun_path)) {
    return Status::InvalidArgument("doorbell path \"" + path + "\" is " +
                                   std::to_string(path.size()) + " bytes; at most " +
                                   std::to_string(sizeof(address.sun_path) - 1));
  }
  struct stat st {};
  if (lstat(path.c_str(), &st) != 0 || !S_ISSOCK(st.st_mode)) {
    return Status::InvalidArgument("doorbell " + path + " is not a socket");
  }
  const int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return Status::Unavailable(std::string("doorbell socket: ") + std::strerror(errno));
  address.sun_family = AF_UNIX;
  std::memcpy(address.sun_path, path.data(), path.size());
  if (connect(fd, reinterpret_cast<const sockaddr*>(&address), sizeof(address)) != 0) {
    const int error = errno;
    close(fd);
    return Status::Unavailable("cannot connect to the doorbell " + path + ": " +
                               std::strerror(error));
  }
  if (segment.doorbell_fd >= 0) close(segment.doorbell_fd);
  segment.doorbell_fd = fd;
  return Status::Ok();
}

uint64_t ClientChannel::Begin(std::string* name, uint64_t* ring_bytes) {
  if (!wanted_ || segment_ || endpoint_.rfind("ipc://", 0) != 0) return 0;
  Result<std::unique_ptr<Segment>> created = Create(ring_bytes_);
  if (!created.ok()) {
    log_(LogLevel::kWarn, "no shared-memory channel (" + created.status().message() +
                              "): requests travel over the socket");
    return 0;
  }
  segment_ = std::move(*created);
  segment_->id = next_id_++;
  *name = segment_->name;
  *ring_bytes = ring_bytes_;
  return segment_->id;
}

void ClientChannel::Attached(uint64_t id, const Result<Reply>& reply) {
  if (!segment_ || segment_->id != id) return;  // dropped meanwhile (the session ended)
  segment_->Unlink();                           // mapped by the daemon, or never will be
  if (!reply.ok()) {
    log_(LogLevel::kWarn, "kvstashd at " + endpoint_ + " attached no shared-memory channel: " +
                              reply.status().message() + "; requests travel over the socket");
    dropped_ = std::move(segment_);
    return;
  }
  const Result<std::string> doorbell = DecodeAttachChannel(*reply->envelope);
  if (doorbell.ok() && !doorbell->empty()) {
    if (Status rung = OpenDoorbell(*segment_, *doorbell); !rung.ok()) {
      log_(LogLevel::kWarn,
           "no doorbell (" + rung.message() + "): a sleeping kvstashd is woken over the socket");
    }
  }
  ready_ = true;
  on_attached_(true);
  log_(LogLevel::kDebug, "shared-memory channel " + segment_->name + " attached");
}

void ClientChannel::Drop(const std::string& why) {
  if (!segment_) return;
  if (ready_) {
    log_(LogLevel::kDebug, "shared-memory channel " + segment_->name + " dropped: " + why);
  }
  ready_ = false;
  wake_wanted_ = false;
  segment_->MarkClosed();
  dropped_ = std::move(segment_);
  on_attached_(false);
}

bool ClientChannel::Push(const proto::Bytes& bytes) {
  if (!ready_ || bytes.size() > channel::MaxFrame(segment_->requests.bytes)) return false;
  channel::Ring& ring = segment_->requests;
  // The daemon sleeps and has no doorbell: the message over ZeroMQ is its
  // wake-up (it reads the ring before that message). With one, the frame
  // goes into the ring and the bell wakes it.
  if (segment_->doorbell_fd < 0 && channel::LoadWord32(ring.awake_word()) == 0) return false;
  switch (ring.Push(bytes.data(), uint32_t(bytes.size()))) {
    case channel::RingResult::kOk: break;
    case channel::RingResult::kCorrupt:
      Drop("kvstashd's head of the request ring is impossible");
      return false;
    default: return false;
  }
  channel::Fence();
  if (channel::LoadWord32(ring.awake_word()) == 0) wake_wanted_ = true;
  return true;
}

bool ClientChannel::WakeDaemon() {
  if (!wake_wanted_) return true;
  wake_wanted_ = false;
  if (!ready_ || segment_->doorbell_fd < 0) return false;
  // One byte: one kernel wake-up of the daemon's frontend.
  const char byte = 1;
  return send(segment_->doorbell_fd, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN;
}

bool ClientChannel::BeforePoll(bool sleeping) {
  if (!ready_) return false;
  Segment& s = *segment_;
  if (!sleeping && s.awake) return true;
  channel::StoreWord32(s.replies.awake_word(), sleeping ? 0u : 1u);
  channel::Fence();
  s.awake = !sleeping;
  return sleeping && s.replies.MaybeReady();
}

void ClientChannel::Receive(const std::function<void(const void* data, size_t size)>& handle) {
  for (int n = 0; n < 4096 && ready_; ++n) {
    Segment& s = *segment_;
    uint32_t size = 0;
    // The frame lives in the segment's buffer; a handler that drops the
    // segment leaves it in dropped_ until the next FreeDropped.
    const channel::RingResult popped = s.replies.Pop(s.frame.data(), s.frame.size() * 8, &size);
    if (popped == channel::RingResult::kEmpty) return;
    if (popped != channel::RingResult::kOk) {
      Drop("kvstashd's reply ring holds an impossible frame");
      return;
    }
    handle(s.frame.data(), size);
  }
}

}  // namespace kvstash::client
