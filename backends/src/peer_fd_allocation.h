// Memory the registering process names by one of its own open descriptors
// (wire PeerFdHandle): a memfd or an unlinked shared-memory file, such as
// SGLang's HiCache host pool. Opened through /proc/<peer pid>/fd/<fd>, where
// the pid is the connection's (SO_PEERCRED), never one the message states.
#pragma once

#include <memory>

#include "host_backend.h"
#include "kvstash/backends/backend.h"

namespace kvstash::backends {

// Opens and maps spec.peer_fd of spec.opener's process, opened and checked
// as every object a client names (client_shm.h: never waiting, a FIFO,
// socket or directory refused with InvalidArgument, one the peer may not
// read and write NotFound, one smaller than spec.size_bytes OutOfRange).
// Also refused (NotFound): a peer without credentials (tcp) or outside the
// daemon's pid namespace, a regular file that is no memfd or tmpfs file, one
// the peer does not own. Thread-safe.
Result<std::shared_ptr<MappedAllocation>> OpenPeerFd(const AllocationSpec& spec,
                                                     const std::shared_ptr<ShmNames>& names);

}  // namespace kvstash::backends
