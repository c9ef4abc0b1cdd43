// The I/O thread's route through the shared-memory channel (docs/protocol.md
// "Shared-memory channel"): it owns the channel of the current connection
// (ClientChannel: the segment, its rings and the daemon's doorbell), decides
// which way each request goes (the request ring while kvstashd takes it
// there, else the socket), wakes a sleeping kvstashd, and reads the replies
// waiting in the reply ring. IoLoop keeps the session: it sends
// AttachChannel when a session is ready and hands the reply here.
//
// I/O thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>

#include "client_request.h"
#include "kvstash/log_sink.h"
#include "kvstash/proto/codec.h"
#include "kvstash/status.h"
#include "shm_channel_client.h"

namespace kvstash::client {

class ChannelRoute {
 public:
  using Log = std::function<void(LogLevel, const std::string&)>;
  // Told whenever the channel becomes usable (true) or stops being so.
  using OnAttached = std::function<void(bool attached)>;

  // `wanted`: ClientOptions::shm_channel; only ipc endpoints get a channel.
  ChannelRoute(bool wanted, std::string endpoint, uint64_t ring_bytes, Log log,
               OnAttached on_attached);

  // Requests may go through the ring.
  bool ready() const { return ready_; }

  // A fresh channel to attach (the AttachChannel request names it), or null
  // when none is wanted, one exists already, or it could not be made.
  const ClientChannel* Begin();
  // kvstashd's answer to the AttachChannel of `attaching` (ignored when that
  // channel was dropped meanwhile).
  void Attached(const ClientChannel* attaching, const Result<Reply>& reply);
  // Stops using the channel (the session ended, or a ring is impossible);
  // it is unmapped at the next FreeDropped, so that a reply read from it
  // stays valid while it is handled.
  void Drop(const std::string& why);
  void FreeDropped() { dropped_.reset(); }

  // Through the request ring when kvstashd takes it there; false: send it
  // over the socket (the ring is full or not ready, the frame too large,
  // or kvstashd sleeps with no doorbell to ring).
  bool Push(const proto::Bytes& bytes);
  // After a round of sends: a frame went into the ring of a sleeping
  // kvstashd. Rings its doorbell; false: wake it with an empty message over
  // the socket instead (no doorbell, or ringing failed).
  bool WakeDaemon();
  // The eventcount's consumer side before a poll: sleeping says "asleep"
  // and returns whether a reply may be waiting (then do not sleep).
  bool BeforePoll(bool sleeping);
  // Hands each reply waiting in the reply ring, in order, to `handle` (the
  // bytes are valid during the call); drops the channel on an impossible
  // frame. A handler may drop the channel.
  void Receive(const std::function<void(const void* data, size_t size)>& handle);

 private:
  const bool wanted_;
  const std::string endpoint_;
  const uint64_t ring_bytes_;
  Log log_;
  OnAttached on_attached_;
  std::unique_ptr<ClientChannel> channel_;
  std::unique_ptr<ClientChannel> dropped_;  // freed at the next FreeDropped
  bool ready_ = false;                      // attached: requests may go through the ring
  bool wake_wanted_ = false;                // a frame went into the ring of a sleeping daemon
};

}  // namespace kvstash::client
