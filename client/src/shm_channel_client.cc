// Creating the channel segment and using its rings from the client.
#include "shm_channel_client.h"

#include "shm_name.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <random>

namespace kvstash::client {

Result<std::unique_ptr<ClientChannel>> ClientChannel::Create(uint64_t ring_bytes) {
  if (!channel::ValidRingBytes(ring_bytes)) {
    return Status::InvalidArgument(
        "channel ring of " + std::to_string(ring_bytes) + " bytes: a power of two from " +
        std::to_string(channel::kMinRingBytes) + " to " + std::to_string(channel::kMaxRingBytes));
  }
  std::unique_ptr<ClientChannel> ch(new ClientChannel());
  ch->name_ = FreshShmName("channel");
  ch->bytes_ = channel::SegmentBytes(ring_bytes, ring_bytes);
  // 0660 with the creator's primary group, as host KV memory and completion
  // boards (docs/deployment.md): a daemon of another uid opens it through
  // the group. The name lives only until the attach is answered.
  constexpr mode_t kMode = 0660;
  const int fd = shm_open(ch->name_.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, kMode);
  if (fd < 0) {
    return Status::Unavailable("cannot create channel " + ch->name_ + ": " + std::strerror(errno));
  }
  ch->linked_ = true;
  if (fchmod(fd, kMode) != 0 || ftruncate(fd, off_t(ch->bytes_)) != 0) {
    const int error = errno;
    close(fd);
    return Status::Exhausted("cannot size channel " + ch->name_ + " to " +
                             std::to_string(ch->bytes_) + " bytes: " + std::strerror(error));
  }
  void* base = mmap(nullptr, ch->bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  const int error = errno;
  close(fd);
  if (base == MAP_FAILED) {
    return Status::Exhausted("cannot map channel " + ch->name_ + ": " + std::strerror(error));
  }
  ch->base_ = static_cast<uint8_t*>(base);
  // A fresh object reads as zeros: positions 0, nobody awake.
  channel::SegmentHeader header{};
  header.magic = channel::kMagic;
  header.version = channel::kVersion;
  header.request_ring_bytes = ring_bytes;
  header.reply_ring_bytes = ring_bytes;
  std::memcpy(ch->base_, &header, sizeof(header));
  ch->requests_ = channel::RequestRing(ch->base_, ring_bytes);
  ch->replies_ = channel::ReplyRing(ch->base_, ring_bytes, ring_bytes);
  ch->frame_.resize(channel::MaxFrame(ring_bytes) / 8 + 1);
  return ch;
}

ClientChannel::~ClientChannel() {
  if (doorbell_fd_ >= 0) close(doorbell_fd_);
  if (base_ != nullptr) {
    MarkClosed();
    munmap(base_, bytes_);
  }
  Unlink();
}

void ClientChannel::MarkClosed() {
  channel::StoreWord32(replies_.awake_word(), 0);
  awake_ = false;
  channel::StoreWord32(base_ + offsetof(channel::SegmentHeader, client_closed), 1);
}

void ClientChannel::Unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

Status ClientChannel::OpenDoorbell(const std::string& path) {
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
  if (doorbell_fd_ >= 0) close(doorbell_fd_);
  doorbell_fd_ = fd;
  return Status::Ok();
}

bool ClientChannel::RingDoorbell() {
  if (doorbell_fd_ < 0) return false;
  const char byte = 1;
  return send(doorbell_fd_, &byte, 1, MSG_DONTWAIT | MSG_NOSIGNAL) == 1 || errno == EAGAIN;
}

ClientChannel::Sent ClientChannel::Push(const proto::Bytes& bytes) {
  if (bytes.size() > channel::MaxFrame(requests_.bytes)) return Sent::kNotSent;
  // The daemon sleeps and has no doorbell: the message over ZeroMQ is its
  // wake-up. With one, the frame goes into the ring and the bell wakes it.
  if (doorbell_fd_ < 0 && channel::LoadWord32(requests_.awake_word()) == 0) return Sent::kNotSent;
  switch (requests_.Push(bytes.data(), uint32_t(bytes.size()))) {
    case channel::RingResult::kOk: break;
    case channel::RingResult::kCorrupt: return Sent::kCorrupt;
    default: return Sent::kNotSent;
  }
  channel::Fence();
  return channel::LoadWord32(requests_.awake_word()) != 0 ? Sent::kRing : Sent::kRingDoorbell;
}

channel::RingResult ClientChannel::Pop(const uint8_t** data, uint32_t* size) {
  *data = reinterpret_cast<const uint8_t*>(frame_.data());
  return replies_.Pop(frame_.data(), frame_.size() * 8, size);
}

bool ClientChannel::SetAwake(bool awake) {
  if (awake && awake_) return true;
  channel::StoreWord32(replies_.awake_word(), awake ? 1u : 0u);
  channel::Fence();
  awake_ = awake;
  return replies_.MaybeReady();
}

}  // namespace kvstash::client
