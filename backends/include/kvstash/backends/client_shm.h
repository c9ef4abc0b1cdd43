// Opening a POSIX shared memory object that a client named: its KV memory, a
// completion board, a copy fence, a shared-memory channel. Every such open
// goes through OpenClientShm.
//
// A client may name anything /dev/shm holds, and the frontend opens it on
// its own thread, which serves every client: an open that waits would stop
// them all, the stop signal included. So the open never waits (O_NONBLOCK:
// a FIFO would wait for its other end, a file under a lease for the lease's
// holder), never follows a symbolic link, and what it opened is checked on
// the descriptor (fstat, no name lookup in between): a regular object, of
// at least the bytes declared, that the client itself could open
// (docs/protocol.md "Trust"). Anything else is refused, naming the object
// and what it is.
//
// Thread-safe: no state.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include "kvstash/backends/peer_credentials.h"
#include "kvstash/status.h"

namespace kvstash::backends {

// An open descriptor of a client's object; closed with this object.
class ClientShmFd {
 public:
  ClientShmFd(int fd, uint64_t size_bytes) : fd_(fd), size_bytes_(size_bytes) {}
  ~ClientShmFd();
  ClientShmFd(ClientShmFd&& other) noexcept;
  ClientShmFd& operator=(ClientShmFd&&) = delete;
  ClientShmFd(const ClientShmFd&) = delete;
  ClientShmFd& operator=(const ClientShmFd&) = delete;

  int fd() const { return fd_; }
  uint64_t size_bytes() const { return size_bytes_; }  // what fstat saw
  // The descriptor is the caller's from now on.
  int Release();

 private:
  int fd_;
  uint64_t size_bytes_;
};

struct ClientShmRequest {
  const char* what = "shared memory";     // names the object in errors: "completion board"
  std::string name;                       // "/name", as shm_open takes it
  bool writable = true;                   // opened read-write, else read-only
  uint64_t min_bytes = 0;                 // it must hold at least this many bytes
  std::optional<PeerCredentials> opener;  // checked: could the client open it itself
};

// Opens `request.name` without ever waiting; see the file comment. Errors:
// InvalidArgument for a bad name or an object that is not a regular shared
// memory object (a FIFO, a socket, a directory, a symbolic link), NotFound
// for one missing or that the client may not open, Unavailable for one that
// another process holds a lease on, OutOfRange for one too small.
Result<ClientShmFd> OpenClientShm(const ClientShmRequest& request);

// The same for a descriptor the client holds, descriptor `fd` of process
// `pid` (opened through /proc; request.name only names it in errors), with
// the same checks on what it names.
Result<ClientShmFd> OpenClientDescriptor(const ClientShmRequest& request, int pid, int fd);

}  // namespace kvstash::backends
