// Opening a client's shared memory object without waiting, and checking it.
#include "kvstash/backends/client_shm.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

namespace kvstash::backends {

namespace {

// What a file of this mode is, for an error message; nullptr for the one
// kind a shared memory object is (a regular file of the shm filesystem).
const char* NotShmKind(mode_t mode) {
  if (S_ISREG(mode)) return nullptr;
  if (S_ISFIFO(mode)) return "a FIFO";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISDIR(mode)) return "a directory";
  if (S_ISCHR(mode)) return "a character device";
  if (S_ISBLK(mode)) return "a block device";
  if (S_ISLNK(mode)) return "a symbolic link";
  return "not a regular file";
}

std::string Named(const ClientShmRequest& request) {
  return std::string(request.what) + " " + request.name;
}

// Why shm_open failed, as the Status the client gets.
Status OpenFailed(const ClientShmRequest& request, int error) {
  switch (error) {
    case ELOOP:  // O_NOFOLLOW met a symbolic link
      return Status::InvalidArgument(Named(request) +
                                     " is a symbolic link, not a shared memory object");
    case ENXIO:  // a socket (or a device with nothing behind it)
      return Status::InvalidArgument(Named(request) +
                                     " is a socket or a device, not a shared memory object");
    case EISDIR:
      return Status::InvalidArgument(Named(request) +
                                     " is a directory, not a shared memory object");
    case EWOULDBLOCK:  // a lease: opening would wait for its holder to let go
      return Status::Unavailable(
          Named(request) + " is leased by another process; kvstashd does not wait for a lease");
    default: return Status::NotFound("cannot open " + Named(request) + ": " + std::strerror(error));
  }
}

}  // namespace

ClientShmFd::~ClientShmFd() {
  if (fd_ >= 0) close(fd_);
}

ClientShmFd::ClientShmFd(ClientShmFd&& other) noexcept
    : fd_(std::exchange(other.fd_, -1)), size_bytes_(other.size_bytes_) {}

int ClientShmFd::Release() { return std::exchange(fd_, -1); }

namespace {

// What the descriptor names must be, whichever way it was opened: checked on
// the descriptor (fstat), so nothing can swap the object in between.
Result<ClientShmFd> CheckOpened(ClientShmFd opened, const ClientShmRequest& request) {
  struct stat st {};
  if (fstat(opened.fd(), &st) != 0) {
    return Status::NotFound("cannot stat " + Named(request) + ": " + std::strerror(errno));
  }
  if (const char* kind = NotShmKind(st.st_mode)) {
    return Status::InvalidArgument(Named(request) + " is " + kind + ", not a shared memory object");
  }
  // The daemon may open more than the client: check what the client itself
  // could open, on the object the descriptor names.
  KVSTASH_RETURN_IF_ERROR(
      MayReadWrite(request.opener, st.st_uid, st.st_gid, st.st_mode, request.name));
  if (uint64_t(st.st_size) < request.min_bytes) {
    return Status::OutOfRange(Named(request) + " holds " + std::to_string(st.st_size) +
                              " bytes, not the " + std::to_string(request.min_bytes) +
                              " bytes declared");
  }
  return ClientShmFd(opened.Release(), uint64_t(st.st_size));
}

}  // namespace

Result<ClientShmFd> OpenClientShm(const ClientShmRequest& request) {
  const std::string& name = request.name;
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos) {
    return Status::InvalidArgument(std::string(request.what) + " name \"" + name +
                                   "\" must be \"/name\" with no other '/' and under 256 bytes");
  }
  const int access = request.writable ? O_RDWR : O_RDONLY;
  const int fd = shm_open(name.c_str(), access | O_NONBLOCK | O_NOFOLLOW | O_CLOEXEC, 0);
  if (fd < 0) return OpenFailed(request, errno);
  return CheckOpened(ClientShmFd(fd, 0), request);
}

Result<ClientShmFd> OpenClientDescriptor(const ClientShmRequest& request, int pid, int fd) {
  if (pid <= 0 || fd < 0) {
    return Status::InvalidArgument(Named(request) + ": no process or descriptor to open");
  }
  // /proc/<pid>/fd/<n> is a link the kernel resolves to the open file itself
  // (O_NOFOLLOW would refuse it); the open never waits all the same.
  const std::string path = "/proc/" + std::to_string(pid) + "/fd/" + std::to_string(fd);
  const int access = request.writable ? O_RDWR : O_RDONLY;
  const int opened = open(path.c_str(), access | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (opened < 0) return OpenFailed(request, errno);
  return CheckOpened(ClientShmFd(opened, 0), request);
}

}  // namespace kvstash::backends
