// One client's shared-memory channel as the daemon sees it
// (kvstash/shm_channel.h for the layout, docs/protocol.md "Shared-memory
// channel"): the client's segment mapped here, its request ring read and its
// reply ring written by the frontend thread.
//
// The client may write any byte of the segment at any time, or shrink it:
// every access runs under the memory fault guard, each side's own position
// lives here, frames are copied out before anyone reads them, and any
// inconsistency is an error that ends the channel (the frontend detaches
// it), never a read or write outside the mapping or a wait on the client.
//
// Frontend thread only.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/shm_channel.h"
#include "kvstash/status.h"
#include "peer.h"

namespace kvstash::server {

class MappedChannel {
 public:
  // Opens and maps the client's segment after checking the name, the ring
  // sizes, the peer's own permission on it (it must be an ipc peer) and the
  // header the client wrote.
  static Result<std::unique_ptr<MappedChannel>> Open(const Peer& peer, const std::string& shm_name,
                                                     uint64_t request_ring_bytes,
                                                     uint64_t reply_ring_bytes);
  ~MappedChannel();
  MappedChannel(const MappedChannel&) = delete;
  MappedChannel& operator=(const MappedChannel&) = delete;

  const Peer& peer() const { return peer_; }
  const std::string& name() const { return name_; }
  // Bytes of the client's segment mapped here.
  uint64_t segment_bytes() const { return bytes_; }
  pid_t pid() const { return peer_.credentials ? peer_.credentials->pid : 0; }

  // The next request frame, copied out into `frame` (the frontend's one
  // buffer for all channels, grown to this ring's largest frame at first
  // use: an idle channel holds no buffer of its own): kOk, kEmpty, or
  // kCorrupt with *why. *data stays valid until `frame` is used again.
  channel::RingResult PopRequest(std::vector<uint64_t>* frame, const uint8_t** data, uint32_t* size,
                                 std::string* why);

  // How a reply went.
  enum class Sent {
    kRing,          // in the ring; the client polls it
    kRingDoorbell,  // in the ring; the client went to sleep: ring its doorbell
    kNotSent,       // the client sleeps, or the ring is full: send it over ZeroMQ
    kCorrupt,       // the client broke the ring (*why): detach, send over ZeroMQ
  };
  Sent PushReply(const uint8_t* data, size_t size, std::string* why);

  // The frontend polls (true) or may sleep (false). Returns whether a
  // request may be waiting (then it must not sleep), or an error.
  Result<bool> SetAwake(bool awake);
  // The client said it is gone (client_closed), its process exited, or its
  // segment is unreadable: the reason, or empty while it lives.
  std::string Ended();

 private:
  MappedChannel() = default;
  bool Guarded(void (*body)(void*), void* arg);

  Peer peer_;
  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  channel::Ring requests_;
  channel::Ring replies_;
  bool awake_ = false;  // what this side last wrote into the request ring's awake word
  int pidfd_ = -1;      // the client process; readable once it exited (-1: use kill)
};

}  // namespace kvstash::server
