// The daemon's doorbell (docs/protocol.md "Shared-memory channel",
// "Doorbell"): one unix datagram socket next to the ipc socket, shared by
// every attached channel. A client whose request went into its ring while
// the frontend slept sends it one byte; the frontend sleeps in zmq_poll on
// this descriptor too, so the wake-up costs one kernel hop instead of
// ZeroMQ's chain of I/O threads. A datagram says "look at my rings": the
// kernel attaches the sender's credentials (SO_PASSCRED), and the frontend
// wakes only the channels of the process that rang, so idle channels cost
// nothing on any turn.
//
// Frontend thread only.
#pragma once

#include <sys/types.h>

#include <memory>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::server {

class Doorbell {
 public:
  // Binds `path` (mode `mode`, like the ipc socket). A socket left there by
  // a daemon that died is removed first; anything else there (a file, a
  // symlink, a folder) is refused, naming it.
  static Result<std::unique_ptr<Doorbell>> Create(const std::string& path, mode_t mode);
  // Closes and removes the path.
  ~Doorbell();
  Doorbell(const Doorbell&) = delete;
  Doorbell& operator=(const Doorbell&) = delete;

  int fd() const { return fd_; }
  const std::string& path() const { return path_; }
  // Reads what is waiting, at most kMaxPerWake datagrams: a client ringing
  // without end keeps the frontend awake (as its socket messages could) but
  // never holds it here. Adds the pid of each sender to `senders` (once
  // each; 0 when the kernel could not name it). Returns how many it read.
  int Drain(std::vector<pid_t>* senders);
  // Whether a drain of `read` datagrams may have met a full queue: then a
  // client was refused (EAGAIN), took the daemon for woken already, and
  // rang nobody's name; every ring must be looked at once.
  bool MayHaveOverflowed(int read) const { return read >= queue_length_; }

  static constexpr int kMaxPerWake = 64;

 private:
  Doorbell() = default;
  int fd_ = -1;
  std::string path_;
  int queue_length_ = 10;  // net.unix.max_dgram_qlen: datagrams queued at most
};

}  // namespace kvstash::server
