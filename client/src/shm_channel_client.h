// The client's end of the shared-memory channel (kvstash/shm_channel.h,
// docs/protocol.md "Shared-memory channel"): the segment this client creates
// (mode 0660 like host KV memory, a fresh name), whose request ring the I/O thread writes and
// whose reply ring it reads once kvstashd attached it. The name is unlinked
// as soon as the daemon answered AttachChannel, so that nothing is left in
// /dev/shm by a client that dies; the mapping goes with the object.
//
// I/O thread only.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/proto/codec.h"
#include "kvstash/shm_channel.h"
#include "kvstash/status.h"

namespace kvstash::client {

class ClientChannel {
 public:
  static Result<std::unique_ptr<ClientChannel>> Create(uint64_t ring_bytes);
  // Marks the segment closed (the daemon detaches it), unmaps and unlinks it.
  ~ClientChannel();
  ClientChannel(const ClientChannel&) = delete;
  ClientChannel& operator=(const ClientChannel&) = delete;

  const std::string& name() const { return name_; }
  uint64_t request_ring_bytes() const { return requests_.bytes; }
  uint64_t reply_ring_bytes() const { return replies_.bytes; }
  // Removes the name (the daemon mapped it, or will not).
  void Unlink();
  // This side stops using the channel: client_closed (the daemon detaches
  // it at its next check) and "asleep" on the reply ring, so that the
  // daemon answers over the socket meanwhile. The destructor does it too.
  void MarkClosed();

  // Connects to the daemon's doorbell named in AttachChannelReply (a unix
  // datagram socket; lstat first: a symlink or anything else is refused).
  // Without one, a sleeping daemon is woken over ZeroMQ.
  Status OpenDoorbell(const std::string& path);
  bool has_doorbell() const { return doorbell_fd_ >= 0; }
  // One byte to the doorbell, never blocking: a full queue (EAGAIN) means
  // the daemon is being woken already; a gone daemon (ECONNREFUSED) is
  // noticed by the socket. Returns whether it was sent.
  bool RingDoorbell();

  enum class Sent {
    kRing,          // in the ring, and the daemon polls it
    kRingDoorbell,  // in the ring; the daemon went to sleep: ring its doorbell
    kNotSent,       // the daemon sleeps (no doorbell), the frame is too large or the ring full
    kCorrupt,       // the daemon's head is impossible: stop using the channel
  };
  Sent Push(const proto::Bytes& bytes);

  // The next reply, copied into this channel's own 8-aligned buffer (valid
  // until the next call): kOk, kEmpty or kCorrupt.
  channel::RingResult Pop(const uint8_t** data, uint32_t* size);
  // The I/O thread polls (true) or may sleep (false); returns whether a
  // reply may be waiting (then it must not sleep).
  bool SetAwake(bool awake);

  // For tests: where the segment lies in this process.
  uint8_t* base() const { return base_; }
  uint64_t bytes() const { return bytes_; }

 private:
  ClientChannel() = default;

  std::string name_;
  bool linked_ = false;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  channel::Ring requests_;
  channel::Ring replies_;
  bool awake_ = false;
  int doorbell_fd_ = -1;
  std::vector<uint64_t> frame_;  // one reply, copied out
};

}  // namespace kvstash::client
