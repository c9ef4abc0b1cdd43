// The file behind an ipc:// endpoint: its folder is created, a live daemon
// already serving there is detected (instead of stealing its socket), the
// mode is set after bind, and the file is removed at shutdown.
//
// One daemon owns a path at a time: it holds an exclusive lock (flock) on
// `<path>.lock` from before it looks at the path until it has removed its
// files. Checking for a live daemon and binding are two steps (and libzmq
// unlinks whatever is at the path when it binds), so without the lock two
// daemons started together both pass the check and both run, the second on
// a socket that took the first's place. The kernel drops the lock of a
// daemon that dies, so what such a daemon left is known stale.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "kvstash/status.h"

namespace kvstash::server {

// "" for endpoints that are not ipc://.
std::string IpcPath(const std::string& endpoint);
// The lock on an ipc path; released (and its file removed) when destroyed,
// which the daemon does after it removed its socket and doorbell.
class IpcPathClaim {
 public:
  ~IpcPathClaim();
  IpcPathClaim(const IpcPathClaim&) = delete;
  IpcPathClaim& operator=(const IpcPathClaim&) = delete;

 private:
  friend Result<std::unique_ptr<IpcPathClaim>> ClaimIpcPath(const std::string& path,
                                                            const std::string& doorbell_path);
  IpcPathClaim() = default;
  int fd_ = -1;
  std::string lock_path_;
};

// Creates missing folders (mode 0750, whatever the umask), takes the path's
// lock and clears the way for bind: nothing at `path` is fine, a stale
// socket (nobody listening) is removed, and so is a stale socket at
// `doorbell_path`; a live daemon (one holding the lock, or listening on the
// socket), a regular file or anything else that is not a socket is refused,
// naming what is there.
Result<std::unique_ptr<IpcPathClaim>> ClaimIpcPath(const std::string& path,
                                                   const std::string& doorbell_path);

}  // namespace kvstash::server
