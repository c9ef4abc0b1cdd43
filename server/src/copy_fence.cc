// Opening an engine's copy fence and holding its bytes.
#include "copy_fence.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvstash/backends/client_shm.h"
#include "kvstash/copy_fence_bytes.h"

namespace kvstash::server {

Result<std::shared_ptr<CopyFence>> CopyFence::Open(const std::string& shm_name,
                                                   const std::optional<PeerCredentials>& opener) {
  // Read-only: a read lock needs no more, and the daemon never writes it.
  Result<backends::ClientShmFd> opened = backends::OpenClientShm(
      {"copy fence", shm_name, /*writable=*/false, /*min_bytes=*/0, opener});
  if (!opened.ok()) return opened.status();
  // kvstashd's own byte, under a lock of its process (not of this open file
  // description): the kernel names the holder of such a lock to the engine,
  // in the engine's pid namespace, and drops it as soon as the exiting
  // process closes its files, before the requests' bytes go with the file.
  struct flock own = fence::OneByte(F_RDLCK, fence::kDaemonByte);
  if (fcntl(opened->fd(), F_SETLK, &own) != 0) {
    return Status::Unavailable("cannot lock kvstashd's byte of copy fence " + shm_name + ": " +
                               std::strerror(errno));
  }
  return std::shared_ptr<CopyFence>(new CopyFence(opened->Release(), shm_name));
}

CopyFence::~CopyFence() { close(fd_); }

Result<bool> CopyFence::Hold(uint64_t request_id) {
  struct flock lock = fence::OneByte(F_RDLCK, fence::RequestByte(request_id));
  if (fcntl(fd_, F_OFD_SETLK, &lock) == 0) {
    // Held first, then looked at: a client that closes its fence after this
    // look waits for the hold (or its deadline) before it does.
    if (EngineAlive()) return true;
    Release(request_id);
    return false;
  }
  if (errno == EAGAIN || errno == EACCES) return false;  // the engine's write lock
  return Status::Unavailable("cannot hold request " + std::to_string(request_id) +
                             " on copy fence " + name_ + ": " + std::strerror(errno));
}

void CopyFence::Release(uint64_t request_id) {
  struct flock lock = fence::OneByte(F_UNLCK, fence::RequestByte(request_id));
  (void)fcntl(fd_, F_OFD_SETLK, &lock);
}

bool CopyFence::GivenUp(uint64_t request_id) const {
  struct flock lock = fence::OneByte(F_RDLCK, fence::RequestByte(request_id));
  if (fcntl(fd_, F_OFD_GETLK, &lock) != 0) return false;
  if (lock.l_type != F_UNLCK) return true;  // a write lock conflicts with our read lock
  return !EngineAlive();
}

bool CopyFence::EngineAlive() const {
  // A write lock would conflict with the engine's read lock.
  struct flock lock = fence::OneByte(F_WRLCK, fence::kEngineByte);
  if (fcntl(fd_, F_OFD_GETLK, &lock) != 0) return true;  // cannot tell: assume alive
  return lock.l_type != F_UNLCK;
}

}  // namespace kvstash::server
