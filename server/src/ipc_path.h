// The file behind an ipc:// endpoint: its folder is created, a live daemon
// already serving there is detected (instead of stealing its socket), the
// mode is set after bind, and the file is removed at shutdown.
#pragma once

#include <cstdint>
#include <string>

#include "kvstash/status.h"

namespace kvstash::server {

// "" for endpoints that are not ipc://.
std::string IpcPath(const std::string& endpoint);
// Creates missing folders (mode 0750, whatever the umask) and clears the
// way for bind: nothing at `path` is fine, a stale socket (nobody listening)
// is removed; a live daemon's socket, a regular file or anything else that
// is not a socket is refused, naming what is there.
Status PrepareIpcPath(const std::string& path);

}  // namespace kvstash::server
