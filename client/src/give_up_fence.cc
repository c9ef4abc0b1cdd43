// Creating the copy fence and taking its bytes.
#include "give_up_fence.h"

#include "shm_name.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "kvstash/copy_fence_bytes.h"

namespace kvstash::client {

namespace {

// A descriptor that becomes readable once process `pid` (of this pid
// namespace) has exited, or -1 with errno.
int PidFdOpen(pid_t pid) {
#ifdef SYS_pidfd_open
  return int(syscall(SYS_pidfd_open, pid, 0));
#else
  errno = ENOSYS;
  return -1;
#endif
}

}  // namespace

Result<std::shared_ptr<GiveUpFence>> GiveUpFence::Create() {
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
  struct flock alive = fence::OneByte(F_RDLCK, fence::kEngineByte);
  if (fchmod(fd, kMode) != 0 || fcntl(fd, F_OFD_SETLK, &alive) != 0) {
    const int error = errno;
    close(fd);
    shm_unlink(name.c_str());
    return Status::Unavailable("cannot set up copy fence " + name + ": " + std::strerror(error));
  }
  return std::shared_ptr<GiveUpFence>(new GiveUpFence(fd, name));
}

GiveUpFence::~GiveUpFence() {
  Unlink();
  if (daemon_pidfd_ >= 0) close(daemon_pidfd_);
  close(fd_);
}

void GiveUpFence::Unlink() {
  if (!linked_) return;
  shm_unlink(name_.c_str());
  linked_ = false;
}

GiveUpFence::GiveUp GiveUpFence::TryGiveUp(uint64_t request_id) {
  struct flock lock = fence::OneByte(F_WRLCK, fence::RequestByte(request_id));
  if (fcntl(fd_, F_OFD_SETLK, &lock) == 0) return GiveUp::kDone;
  return errno == EAGAIN || errno == EACCES ? GiveUp::kBusy : GiveUp::kFailed;
}

std::optional<pid_t> GiveUpFence::DaemonByteHolder() const {
  // A write lock here would conflict with kvstashd's read lock; the kernel
  // answers with the first lock in the way and its owner's pid translated
  // into this process's pid namespace (0: not visible here; -1: an open
  // file description's lock, which names no process).
  struct flock lock = fence::OneByte(F_WRLCK, fence::kDaemonByte);
  if (fcntl(fd_, F_OFD_GETLK, &lock) != 0 || lock.l_type == F_UNLCK) return std::nullopt;
  return lock.l_pid;
}

Status GiveUpFence::WatchDaemon(uint32_t claimed_pid) {
  if (watch_) return *watch_;
  watch_ = [&]() -> Status {
    if (claimed_pid == 0) return Status::Unavailable("kvstashd named no pid (an older kvstashd)");
    const std::optional<pid_t> holder = DaemonByteHolder();
    if (!holder) return Status::Unavailable("nobody holds kvstashd's byte of the fence");
    if (*holder != pid_t(claimed_pid)) {
      return Status::Unavailable(
          "kvstashd names itself pid " + std::to_string(claimed_pid) +
          " but its fence is held by pid " + std::to_string(*holder) +
          " of this process's pid namespace (0: not visible from it; another pid namespace?)");
    }
    const int pidfd = PidFdOpen(*holder);
    if (pidfd < 0) {
      return Status::Unavailable("pidfd_open(" + std::to_string(*holder) +
                                 ") failed: " + std::strerror(errno));
    }
    // Held before and after the pidfd was opened: the pid named kvstashd's
    // process all along (a pid is reused only once its process is gone).
    if (DaemonByteHolder() != holder) {
      close(pidfd);
      return Status::Unavailable("kvstashd (pid " + std::to_string(*holder) +
                                 ") let go of its fence while it was identified");
    }
    daemon_pid_ = *holder;
    daemon_pidfd_ = pidfd;
    return Status::Ok();
  }();
  return *watch_;
}

GiveUpFence::Daemon GiveUpFence::daemon() const {
  if (daemon_pidfd_ < 0) return Daemon::kUnknown;
  if (DaemonByteHolder() == daemon_pid_) return Daemon::kAlive;
  struct pollfd exited {};
  exited.fd = daemon_pidfd_;
  exited.events = POLLIN;
  if (poll(&exited, 1, 0) == 1 && (exited.revents & POLLIN) != 0) return Daemon::kGone;
  return Daemon::kExiting;
}

}  // namespace kvstash::client
