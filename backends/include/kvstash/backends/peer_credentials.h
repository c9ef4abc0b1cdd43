// The process on whose behalf the daemon opens memory: its credentials, as
// the kernel gave them for its ipc connection, and the permission check a
// backend makes before it opens anything a peer named. A backend opens
// nothing on a peer's behalf that the peer could not open itself
// (docs/protocol.md "Trust").
#pragma once

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::backends {

struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

// The peer's supplementary groups, from /proc/<pid>/status "Groups:", plus
// its primary gid. Read when needed (registration, admin checks), not cached:
// a pid names the live process behind the still-open connection.
std::vector<gid_t> PeerGroups(const PeerCredentials& peer);

// Whether a peer could open, read and write a file with this owner and mode
// itself (POSIX: the owner class if it owns it, else the group class if it
// is in the group, else other). Root may open anything.
Status MayReadWrite(const std::optional<PeerCredentials>& peer, uid_t owner, gid_t group,
                    mode_t mode, const std::string& name);

}  // namespace kvstash::backends
