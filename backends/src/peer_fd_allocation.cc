// A peer's memfd, mapped by the host backend.
#include "peer_fd_allocation.h"

#include <fcntl.h>
#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvstash::backends {

Result<std::shared_ptr<MappedAllocation>> OpenPeerFd(const AllocationSpec& spec,
                                                     const std::shared_ptr<ShmNames>& names) {
  if (!spec.opener) {
    return Status::NotFound(
        "a peer's descriptor can be registered over an ipc:// socket only (a tcp peer has no "
        "process the daemon can name)");
  }
  if (spec.opener->pid <= 0) {
    return Status::NotFound(
        "the peer's process is not visible in kvstashd's pid namespace; run kvstashd in the "
        "engine's pid namespace to register its descriptors");
  }
  const std::string name = "descriptor " + std::to_string(spec.peer_fd) + " of process " +
                           std::to_string(spec.opener->pid);
  if (spec.peer_fd < 0) return Status::InvalidArgument(name + ": descriptors are >= 0");
  // Opened and checked as any object a client names (client_shm.h): never
  // waiting, a regular file the peer itself may read and write, of the bytes
  // declared; then what only a descriptor needs.
  Result<ClientShmFd> opened =
      OpenClientDescriptor({"shared memory", name, /*writable=*/true, spec.size_bytes, spec.opener},
                           spec.opener->pid, spec.peer_fd);
  if (!opened.ok()) return opened.status();
  // Only shared-memory files (memfd, tmpfs) know seals: a file on disk would
  // page its bytes through the page cache and a filesystem.
  if (fcntl(opened->fd(), F_GET_SEALS) < 0) {
    return Status::NotFound(name + " is not a memfd or a shared-memory file");
  }
  struct stat st {};
  if (fstat(opened->fd(), &st) != 0) {
    return Status::NotFound("cannot stat " + name + ": " + std::strerror(errno));
  }
  if (spec.opener->uid != 0 && st.st_uid != spec.opener->uid) {
    return Status::NotFound(name + " belongs to uid " + std::to_string(st.st_uid) +
                            ", not to the peer's uid " + std::to_string(spec.opener->uid));
  }
  return MapHostMemory(*opened, spec.size_bytes, name, names);
}

}  // namespace kvstash::backends
