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
// Creates the folder; fails if a process accepts connections at `path`.
Status PrepareIpcPath(const std::string& path);

}  // namespace kvstash::server
