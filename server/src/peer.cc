// Peer addresses and the admin policy.
#include "peer.h"

#include <grp.h>
#include <unistd.h>

#include <cstdlib>

namespace kvstash::server {

namespace {

bool ParseNumber(const std::string& text, uint64_t* out) {
  if (text.empty() || text.size() > 10 ||
      text.find_first_not_of("0123456789") != std::string::npos) {
    return false;
  }
  *out = std::strtoull(text.c_str(), nullptr, 10);
  return *out <= 0xffffffffull;
}

}  // namespace

std::optional<PeerCredentials> ParsePeerAddress(const std::string& address) {
  // "<host>:uid:gid:pid" (libzmq 4.3 writes "localhost" or nothing before).
  // Read on every message: the last three ':'-separated fields, no streams.
  const size_t pid_colon = address.rfind(':');
  if (pid_colon == std::string::npos || pid_colon == 0) return std::nullopt;
  const size_t gid_colon = address.rfind(':', pid_colon - 1);
  if (gid_colon == std::string::npos) return std::nullopt;
  const size_t uid_colon = gid_colon == 0 ? std::string::npos : address.rfind(':', gid_colon - 1);
  const size_t uid_begin = uid_colon == std::string::npos ? 0 : uid_colon + 1;
  uint64_t uid = 0, gid = 0, pid = 0;
  if (!ParseNumber(address.substr(uid_begin, gid_colon - uid_begin), &uid) ||
      !ParseNumber(address.substr(gid_colon + 1, pid_colon - gid_colon - 1), &gid) ||
      !ParseNumber(address.substr(pid_colon + 1), &pid)) {
    return std::nullopt;
  }
  return PeerCredentials{uid_t(uid), gid_t(gid), pid_t(pid)};
}

Result<AccessPolicy> AccessPolicy::Create(const std::string& admin_group) {
  std::optional<gid_t> gid;
  if (!admin_group.empty()) {
    uint64_t number = 0;
    if (ParseNumber(admin_group, &number)) {
      gid = gid_t(number);
    } else {
      const struct group* found = getgrnam(admin_group.c_str());
      if (found == nullptr) {
        return Status::InvalidArgument(
            "--admin-group \"" + admin_group +
            "\" names no group of this system (give a group name or gid)");
      }
      gid = found->gr_gid;
    }
  }
  return AccessPolicy(geteuid(), gid);
}

bool AccessPolicy::IsAdmin(const Peer& peer) const {
  if (!peer.credentials) return false;
  const PeerCredentials& c = *peer.credentials;
  if (c.uid == 0 || c.uid == daemon_uid_) return true;
  if (!admin_gid_) return false;
  for (gid_t g : PeerGroups(c)) {
    if (g == *admin_gid_) return true;
  }
  return false;
}

}  // namespace kvstash::server
