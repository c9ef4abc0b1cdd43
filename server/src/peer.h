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

#include "kvstash/backends/peer_credentials.h"
#include "kvstash/status.h"

namespace kvstash::server {

// A peer's credentials and what it may open are the backends' words: they
// open engine memory on a peer's behalf.
using backends::MayReadWrite;
using backends::PeerCredentials;
using backends::PeerGroups;

// The ROUTER identity of a connection. libkvstash keeps one identity across
// reconnects (router_handover), so what a connection owns survives them.
using PeerId = std::string;

struct Peer {
  PeerId id;
  std::optional<PeerCredentials> credentials;  // absent for tcp peers
};

// Parses libzmq's "Peer-Address" of an ipc connection: the last three
// ':'-separated fields are uid, gid and pid. nullopt when they are not.
std::optional<PeerCredentials> ParsePeerAddress(const std::string& address);

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

}  // namespace kvstash::server
