// Who sent a request: the connection's ROUTER identity and, on ipc sockets,
// the peer process's credentials (SO_PEERCRED, which libzmq exposes as the
// message property "Peer-Address" = "...:uid:gid:pid"). tcp peers have no
// credentials: they are never admins and cannot register host memory.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::server {

// The ROUTER identity of a connection. libkvstash keeps one identity across
// reconnects (router_handover), so what a connection owns survives them.
using PeerId = std::string;

struct PeerCredentials {
  uid_t uid = 0;
  gid_t gid = 0;
  pid_t pid = 0;
};

struct Peer {
  PeerId id;
  std::optional<PeerCredentials> credentials;  // absent for tcp peers
};

// Parses libzmq's "Peer-Address" of an ipc connection: the last three
// ':'-separated fields are uid, gid and pid. nullopt when they are not.
std::optional<PeerCredentials> ParsePeerAddress(const std::string& address);

// The peer's supplementary groups, from /proc/<pid>/status "Groups:", plus
// its primary gid. Read when needed (registration, admin checks), not cached:
// a pid names the live process behind the still-open connection.
std::vector<gid_t> PeerGroups(const PeerCredentials& peer);

// Who may do what. Admins are the daemon's own uid, root, and members of the
// configured admin group (--admin-group); a peer without credentials (tcp)
// never is. docs/protocol.md "Trust".
class AccessPolicy {
 public:
  // admin_group: a group name or numeric gid; empty = no admin group.
  static Result<AccessPolicy> Create(const std::string& admin_group);
  bool IsAdmin(const Peer& peer) const;

 private:
  AccessPolicy(uid_t daemon_uid, std::optional<gid_t> admin_gid)
      : daemon_uid_(daemon_uid), admin_gid_(admin_gid) {}
  uid_t daemon_uid_;
  std::optional<gid_t> admin_gid_;
};

// Whether a peer could open, read and write a file with this owner and mode
// itself (POSIX: the owner class if it owns it, else the group class if it
// is in the group, else other). Root may open anything.
Status MayReadWrite(const std::optional<PeerCredentials>& peer, uid_t owner, gid_t group,
                    mode_t mode, const std::string& name);

}  // namespace kvstash::server
