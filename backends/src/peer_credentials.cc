// Who may open what: a peer's groups and the POSIX permission classes.
#include "kvstash/backends/peer_credentials.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>

namespace kvstash::backends {

std::vector<gid_t> PeerGroups(const PeerCredentials& peer) {
  std::vector<gid_t> groups{peer.gid};
  std::ifstream status("/proc/" + std::to_string(peer.pid) + "/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("Groups:", 0) != 0) continue;
    std::istringstream in(line.substr(7));
    uint64_t gid = 0;
    while (in >> gid) groups.push_back(gid_t(gid));
    break;
  }
  return groups;
}

Status MayReadWrite(const std::optional<PeerCredentials>& peer, uid_t owner, gid_t group,
                    mode_t mode, const std::string& name) {
  if (!peer) {
    return Status::NotFound("a peer without credentials (tcp) may not register " + name +
                            ": host shared memory is registered over the ipc socket only");
  }
  if (peer->uid == 0) return Status::Ok();
  mode_t need = 0;
  if (peer->uid == owner) {
    need = S_IRUSR | S_IWUSR;
  } else {
    bool member = false;
    for (gid_t g : PeerGroups(*peer)) member = member || g == group;
    need = member ? (S_IRGRP | S_IWGRP) : (S_IROTH | S_IWOTH);
  }
  if ((mode & need) != need) {
    return Status::NotFound("peer uid " + std::to_string(peer->uid) + " may not open " + name);
  }
  return Status::Ok();
}

}  // namespace kvstash::backends
