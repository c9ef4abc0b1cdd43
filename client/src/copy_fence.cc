// Creating the copy fence and taking its bytes.
#include "copy_fence.h"

#include "shm_name.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <limits>
#include <random>

namespace kvstash::client {

Result<std::shared_ptr<CopyFence>> CopyFence::Create() {
  const std::string name = FreshShmName("fence");
  // 0660 with the creator's primary group, as host KV memory and completion
  // boards: a daemon of another uid opens it through the group.
  constexpr mode_t kMode = 0660;
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, kMode);
  if (fd < 0) {
    return Status::Unavailable("cannot create copy fence " + name + ": " + std::strerror(errno));
  }
  // Byte 0 (no request's: ids start at 1) says the client is alive: held
  // until the descriptor closes, with the client or its process.
  struct flock alive {};
  alive.l_type = F_RDLCK;
  alive.l_whence = SEEK_SET;
  alive.l_start = 0;
  alive.l_len = 1;
  if (fchmod(fd, kMode) != 0 || fcntl(fd, F_OFD_SETLK, &alive) != 0) {
    const int error = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status::Unavailable("cannot set up copy fence " + name + ": " + std::strerror(error));
  }
  return std::shared_ptr<CopyFence>(new CopyFence(fd, name));
}

CopyFence::~CopyFence() {
  Unlink();
  close(fd_);
}

void CopyFence::Unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

CopyFence::GiveUp CopyFence::TryGiveUp(uint64_t request_id) {
  struct flock lock {};
  lock.l_type = F_WRLCK;
  lock.l_whence = SEEK_SET;
  lock.l_start = off_t(request_id & uint64_t(std::numeric_limits<off_t>::max()));
  lock.l_len = 1;
  if (fcntl(fd_, F_OFD_SETLK, &lock) == 0) return GiveUp::kDone;
  return errno == EAGAIN || errno == EACCES ? GiveUp::kBusy : GiveUp::kFailed;
}

}  // namespace kvstash::client
