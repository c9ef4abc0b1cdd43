// The client's end of the shared-memory channel (kvstash/shm_channel.h,
// docs/protocol.md "Shared-memory channel"): the segment of the current
// session (created mode 0660 like host KV memory, under a fresh name that
// is unlinked as soon as kvstashd answered AttachChannel, so that a client
// that dies leaves nothing in /dev/shm), the daemon's doorbell, and which
// way each request goes: the request ring while kvstashd takes it there,
// else the socket. IoLoop keeps the session: it sends AttachChannel when a
// session is ready and hands the reply here.
//
// I/O thread only.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "client_request.h"
#include "kvstash/log_sink.h"
#include "kvstash/proto/codec.h"
#include "kvstash/shm_channel.h"
#include "kvstash/status.h"

namespace kvstash::client {

class ClientChannel {
 public:
  using Log = std::function<void(LogLevel, const std::string&)>;
  // Told whenever the channel becomes usable (true) or stops being so.
  using OnAttached = std::function<void(bool attached)>;

  // `wanted`: ClientOptions::shm_channel; only ipc endpoints get a channel.
  ClientChannel(bool wanted, std::string endpoint, uint64_t ring_bytes, Log log,
                OnAttached on_attached);
  ClientChannel(const ClientChannel&) = delete;
  ClientChannel& operator=(const ClientChannel&) = delete;

  // Requests may go through the ring.
  bool ready() const { return ready_; }

  // A fresh segment to attach: the AttachChannel request names it (`name`,
  // ring bytes) and its answer goes to Attached with the id returned; 0
  // when none is wanted, one exists already, or it could not be made.
  uint64_t Begin(std::string* name, uint64_t* ring_bytes);
  // kvstashd's answer to AttachChannel `id` (ignored when that segment was
  // dropped meanwhile).
  void Attached(uint64_t id, const Result<Reply>& reply);
  // Stops using the segment (the session ended, kvstashd closed it, or a
  // ring is impossible): marks it closed, so that the daemon detaches it,
  // and unmaps it at the next FreeDropped, so that a reply read from it
  // stays valid while it is handled.
  void Drop(const std::string& why);
  void FreeDropped() { dropped_.reset(); }

  // Through the request ring when kvstashd takes it there; false: send it
  // over the socket (the ring is full or not ready, the frame too large,
  // or kvstashd sleeps with no doorbell to ring).
  bool Push(const proto::Bytes& bytes);
  // After a round of sends into the ring of a sleeping kvstashd: rings its
  // doorbell (a full queue means it is being woken already); false: wake
  // it with an empty message over the socket instead.
  bool WakeDaemon();
  // The eventcount's consumer side before a poll: sleeping writes "asleep"
  // and returns whether a reply may be waiting (then do not sleep).
  bool BeforePoll(bool sleeping);
  // Hands each reply waiting in the reply ring, in order, to `handle` (the
  // bytes are valid during the call); drops the segment on an impossible
  // frame. A handler may drop it.
  void Receive(const std::function<void(const void* data, size_t size)>& handle);

 private:
  // One mapped segment; its destructor marks it closed, unmaps and unlinks
  // it and closes the doorbell.
  struct Segment {
    ~Segment();
    void MarkClosed();
    void Unlink();
    uint64_t id = 0;
    std::string name;
    bool linked = false;
    uint8_t* base = nullptr;
    uint64_t bytes = 0;
    channel::Ring requests;
    channel::Ring replies;
    bool awake = false;
    int doorbell_fd = -1;
    std::vector<uint64_t> frame;  // one reply, copied out, 8-aligned
  };
  static Result<std::unique_ptr<Segment>> Create(uint64_t ring_bytes);
  // Connects to the daemon's doorbell (a unix datagram socket; lstat
  // first: a symlink or anything else is refused).
  static Status OpenDoorbell(Segment& segment, const std::string& path);

  const bool wanted_;
  const std::string endpoint_;
  const uint64_t ring_bytes_;
  Log log_;
  OnAttached on_attached_;
  std::unique_ptr<Segment> segment_;
  std::unique_ptr<Segment> dropped_;  // freed at the next FreeDropped
  uint64_t next_id_ = 1;
  bool ready_ = false;        // attached: requests may go through the ring
  bool wake_wanted_ = false;  // a frame went into the ring of a sleeping daemon
};

}  // namespace kvstash::client
