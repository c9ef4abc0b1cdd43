// Opening a client's channel segment and using its rings under the guard.
#include "mapped_channel.h"

#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvstash/backends/client_shm.h"
#include "kvstash/backends/memory_fault_guard.h"

namespace kvstash::server {

namespace {

using channel::Ring;
using channel::RingResult;

struct PopCall {
  Ring* ring;
  void* out;
  uint64_t out_bytes;
  uint32_t size;
  RingResult result;
};
void DoPop(void* arg) {
  auto* call = static_cast<PopCall*>(arg);
  call->result = call->ring->Pop(call->out, call->out_bytes, &call->size);
}

struct PushCall {
  Ring* ring;
  const uint8_t* data;
  uint32_t size;
  bool was_awake;
  bool still_awake;
  RingResult result;
};
void DoPush(void* arg) {
  auto* call = static_cast<PushCall*>(arg);
  call->was_awake = channel::LoadWord32(call->ring->awake_word()) != 0;
  if (!call->was_awake) return;  // a ZeroMQ message wakes it: no doorbell needed
  call->result = call->ring->Push(call->data, call->size);
  if (call->result != RingResult::kOk) return;
  channel::Fence();
  call->still_awake = channel::LoadWord32(call->ring->awake_word()) != 0;
}

struct AwakeCall {
  Ring* ring;
  uint32_t awake;
  bool ready;
};
void DoAwake(void* arg) {
  auto* call = static_cast<AwakeCall*>(arg);
  channel::StoreWord32(call->ring->awake_word(), call->awake);
  channel::Fence();
  call->ready = call->ring->MaybeReady();
}

struct ClosedCall {
  const uint8_t* base;
  uint32_t closed;
};
void DoClosed(void* arg) {
  auto* call = static_cast<ClosedCall*>(arg);
  call->closed = __atomic_load_n(reinterpret_cast<const uint32_t*>(
                                     call->base + offsetof(channel::SegmentHeader, client_closed)),
                                 __ATOMIC_ACQUIRE);
}

struct HeaderCall {
  const uint8_t* base;
  channel::SegmentHeader header;
};
void DoHeader(void* arg) {
  auto* call = static_cast<HeaderCall*>(arg);
  std::memcpy(&call->header, call->base, sizeof(call->header));
}

}  // namespace

Result<std::unique_ptr<MappedChannel>> MappedChannel::Open(const Peer& peer,
                                                           const std::string& shm_name,
                                                           uint64_t request_ring_bytes,
                                                           uint64_t reply_ring_bytes) {
  if (!peer.credentials) {
    return Status::InvalidArgument(
        "a peer without credentials (tcp) may not attach a shared-memory channel: it is for "
        "clients on the daemon's ipc socket");
  }
  for (uint64_t ring : {request_ring_bytes, reply_ring_bytes}) {
    if (!channel::ValidRingBytes(ring)) {
      return Status::InvalidArgument(
          "channel " + shm_name + " declares a ring of " + std::to_string(ring) +
          " bytes; a ring holds a power of two from " + std::to_string(channel::kMinRingBytes) +
          " to " + std::to_string(channel::kMaxRingBytes) + " bytes");
    }
  }
  const uint64_t bytes = channel::SegmentBytes(request_ring_bytes, reply_ring_bytes);
  Result<backends::ClientShmFd> opened =
      backends::OpenClientShm({"channel", shm_name, /*writable=*/true, bytes, peer.credentials});
  if (!opened.ok()) return opened.status();
  void* base = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, opened->fd(), 0);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of channel " + shm_name + " failed: " + std::strerror(errno));
  }
  backends::MemoryFaultGuard::Install();
  std::unique_ptr<MappedChannel> ch(new MappedChannel());
  ch->peer_ = peer;
  ch->name_ = shm_name;
  ch->base_ = static_cast<uint8_t*>(base);
  ch->bytes_ = bytes;
  HeaderCall header{ch->base_, {}};
  if (!ch->Guarded(DoHeader, &header)) {
    return Status::OutOfRange("channel " + shm_name + " shrank while it was being attached");
  }
  if (header.header.magic != channel::kMagic || header.header.version != channel::kVersion ||
      header.header.request_ring_bytes != request_ring_bytes ||
      header.header.reply_ring_bytes != reply_ring_bytes) {
    return Status::InvalidArgument(
        "channel " + shm_name + " has header magic " + std::to_string(header.header.magic) +
        " version " + std::to_string(header.header.version) + " rings " +
        std::to_string(header.header.request_ring_bytes) + "/" +
        std::to_string(header.header.reply_ring_bytes) + "; expected magic " +
        std::to_string(channel::kMagic) + " version " + std::to_string(channel::kVersion) +
        " and the ring sizes of the request");
  }
  ch->requests_ = channel::RequestRing(ch->base_, request_ring_bytes);
  ch->replies_ = channel::ReplyRing(ch->base_, request_ring_bytes, reply_ring_bytes);
  // The positions the client starts from: whatever its words say now, read
  // once and kept here (a bad value shows as corruption at the first use).
  struct Start {
    Ring* requests;
    Ring* replies;
  } start{&ch->requests_, &ch->replies_};
  if (!ch->Guarded(
          [](void* arg) {
            auto* s = static_cast<Start*>(arg);
            s->requests->position = channel::LoadWord64(s->requests->head_word());
            s->replies->position = channel::LoadWord64(s->replies->tail_word());
          },
          &start)) {
    return Status::OutOfRange("channel " + shm_name + " shrank while it was being attached");
  }
  ch->pidfd_ = int(syscall(SYS_pidfd_open, peer.credentials->pid, 0));
  return ch;
}

MappedChannel::~MappedChannel() {
  if (pidfd_ >= 0) close(pidfd_);
  if (base_ != nullptr) munmap(base_, bytes_);
}

bool MappedChannel::Guarded(void (*body)(void*), void* arg) {
  uintptr_t fault = 0;
  return backends::MemoryFaultGuard::RunGuarded(base_, bytes_, body, arg, &fault);
}

channel::RingResult MappedChannel::PopRequest(std::vector<uint64_t>* frame, const uint8_t** data,
                                              uint32_t* size, std::string* why) {
  const size_t words = channel::MaxFrame(requests_.bytes) / 8 + 1;
  if (frame->size() < words) frame->resize(words);
  PopCall call{&requests_, frame->data(), frame->size() * 8, 0, RingResult::kEmpty};
  if (!Guarded(DoPop, &call)) {
    *why = "its segment " + name_ + " shrank under the daemon (SIGBUS on the request ring)";
    return RingResult::kCorrupt;
  }
  if (call.result == RingResult::kCorrupt) {
    *why = "its request ring holds an impossible frame or position (request ring head " +
           std::to_string(requests_.position) + ")";
  }
  *data = reinterpret_cast<const uint8_t*>(frame->data());
  *size = call.size;
  return call.result;
}

MappedChannel::Sent MappedChannel::PushReply(const uint8_t* data, size_t size, std::string* why) {
  if (size > channel::MaxFrame(replies_.bytes)) return Sent::kNotSent;
  PushCall call{&replies_, data, uint32_t(size), false, false, RingResult::kFull};
  if (!Guarded(DoPush, &call)) {
    *why = "its segment " + name_ + " shrank under the daemon (SIGBUS on the reply ring)";
    return Sent::kCorrupt;
  }
  if (!call.was_awake) return Sent::kNotSent;
  switch (call.result) {
    case RingResult::kOk: return call.still_awake ? Sent::kRing : Sent::kRingDoorbell;
    case RingResult::kCorrupt:
      *why = "its reply ring's head is impossible (tail " + std::to_string(replies_.position) + ")";
      return Sent::kCorrupt;
    default: return Sent::kNotSent;  // full: backpressure, ZeroMQ carries it
  }
}

Result<bool> MappedChannel::SetAwake(bool awake) {
  // Polling already: the frontend drains the ring on this turn anyway.
  // Going to sleep always stores, fences and looks again (the eventcount).
  if (awake && awake_) return true;
  AwakeCall call{&requests_, awake ? 1u : 0u, false};
  if (!Guarded(DoAwake, &call)) {
    return Status::OutOfRange("its segment " + name_ + " shrank under the daemon");
  }
  awake_ = awake;
  return call.ready;
}

std::string MappedChannel::Ended() {
  ClosedCall call{base_, 0};
  if (!Guarded(DoClosed, &call)) return "its segment " + name_ + " shrank under the daemon";
  if (call.closed != 0) return "the client closed it";
  const pid_t pid = peer_.credentials ? peer_.credentials->pid : 0;
  if (pidfd_ >= 0) {
    pollfd item{pidfd_, POLLIN, 0};
    if (poll(&item, 1, 0) > 0) return "client process " + std::to_string(pid) + " exited";
  } else if (pid > 0 && kill(pid, 0) != 0 && errno == ESRCH) {
    return "client process " + std::to_string(pid) + " exited";
  }
  return std::string();
}

}  // namespace kvstash::server
