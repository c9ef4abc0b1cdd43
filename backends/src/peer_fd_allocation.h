// Memory the registering process names by one of its own open descriptors
// (wire PeerFdHandle): a memfd or an unlinked shared-memory file, such as
// SGLang's HiCache host pool. Opened through /proc/<peer pid>/fd/<fd>, where
// the pid is the connection's (SO_PEERCRED), never one the message states.
#pragma once

#include <memory>

#include "kvstash/backends/backend.h"
#include "host_backend.h"

namespace kvstash::backends {

// Opens and maps spec.peer_fd of spec.opener's process. Refused: a peer
// without credentials (tcp) or outside the daemon's pid namespace
// (NotFound), a descriptor that is not a shared-memory file (memfd or
// tmpfs) or that the peer does not own or may not read and write
// (NotFound), one smaller than spec.size_bytes (OutOfRange). The open never
// blocks (O_NONBLOCK: a FIFO or device behind the number is refused after
// fstat, not waited on). Thread-safe.
Result<std::shared_ptr<MappedAllocation>> OpenPeerFd(const AllocationSpec& spec,
                                                     const std::shared_ptr<ShmNames>& names);

}  // namespace kvstash::backends
