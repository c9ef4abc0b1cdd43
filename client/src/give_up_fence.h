// GiveUpFence: the engine's side of the copy fence (docs/protocol.md "The
// copy fence"), what lets libkvstash give up on a sent request safely:
// a POSIX shared memory object of no size, named in RegisterKV and unlinked
// once answered, used only for its byte-range locks
// (kvstash/copy_fence_bytes.h). kvstashd holds a read lock on byte
// `request id` while it copies that request's chunks; before libkvstash
// reports a sent Store or Retrieve failed (deadline, Goodbye, lost
// connection), it takes a write lock on that byte and keeps it, so that
// kvstashd copies nothing of the request afterwards. A read lock on byte 0,
// held while the fence is open, tells kvstashd that the client is alive:
// once it is gone, kvstashd copies nothing more for its requests.
//
// A process that exits drops its locks while it closes its files, and
// copies it queued on a GPU may still run until the driver has torn its
// context down, by the time the process is gone. So the fence also watches
// kvstashd's process: a byte that kvstashd's process locks (a classic lock,
// dropped before the requests' bytes when it exits) says whether it had
// begun to exit, and a pidfd says when it is gone.
//
// Shared by the registration that named it and the requests sent for it;
// used by the I/O thread only (Create and Unlink by whoever registers).
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "kvstash/status.h"

namespace kvstash::client {

class GiveUpFence {
 public:
  static Result<std::shared_ptr<GiveUpFence>> Create();
  ~GiveUpFence();  // closing drops every lock: only once no daemon may still copy
  GiveUpFence(const GiveUpFence&) = delete;
  GiveUpFence& operator=(const GiveUpFence&) = delete;

  const std::string& name() const { return name_; }
  // Once kvstashd opened it (or refused it): nobody else can from now on.
  void Unlink();

  enum class GiveUp {
    kDone,   // the request is ours: kvstashd copies nothing of it from now on
    kBusy,   // kvstashd is copying it: ask again shortly
    kFailed  // the lock cannot be taken: the fence cannot say
  };
  GiveUp TryGiveUp(uint64_t request_id);

  // Identifies the process of the kvstashd that holds the fence, while it
  // does: kvstashd named `claimed_pid` in its Hello, in its own pid
  // namespace; the kernel names the holder of kvstashd's byte in this
  // process's namespace (0 when it is not visible here). Only when both are
  // the same pid is that process watched (a pidfd), else the error says
  // why. The first call decides; later ones return its answer.
  Status WatchDaemon(uint32_t claimed_pid);
  bool watch_decided() const { return watch_.has_value(); }

  // kvstashd's process as the fence sees it now. After TryGiveUp returned
  // kDone, kAlive means that the byte was released by kvstashd, not by its
  // process exiting (which drops kvstashd's byte first).
  enum class Daemon {
    kUnknown,  // not watched (see WatchDaemon)
    kAlive,    // its process holds kvstashd's byte: it has not begun to exit
    kExiting,  // kvstashd's byte is free, but its process is not gone yet
    kGone      // its process has exited: all its files closed
  };
  Daemon daemon() const;

 private:
  GiveUpFence(int fd, std::string name) : fd_(fd), name_(std::move(name)) {}
  // The pid (in this namespace) holding kvstashd's byte; 0 when not visible
  // here, nullopt when nobody holds it (or the kernel cannot say).
  std::optional<pid_t> DaemonByteHolder() const;

  const int fd_;
  const std::string name_;
  bool linked_ = true;
  std::optional<Status> watch_;  // WatchDaemon's answer
  pid_t daemon_pid_ = 0;         // watched: kvstashd's pid here
  int daemon_pidfd_ = -1;
};

}  // namespace kvstash::client
