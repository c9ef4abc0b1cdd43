// A peer's memfd, mapped by the host backend.
#include "peer_fd_allocation.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string>

namespace kvstash::backends {

namespace {

class PeerFdAllocation : public MappedAllocation {
 public:
  PeerFdAllocation(uint8_t* base, uint64_t size, const std::string& name,
                   std::shared_ptr<ShmNames> names)
      : base_(base), size_(size), names_(std::move(names)) {
    names_->Add(base_, size_, name);
  }
  ~PeerFdAllocation() override {
    names_->Remove(base_);
    munmap(base_, size_);
  }
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return 0; }

 private:
  uint8_t* base_;
  uint64_t size_;
  std::shared_ptr<ShmNames> names_;
};

// Closes a descriptor on every path out.
class FdCloser {
 public:
  explicit FdCloser(int fd) : fd_(fd) {}
  ~FdCloser() {
    if (fd_ >= 0) close(fd_);
  }
  FdCloser(const FdCloser&) = delete;
  FdCloser& operator=(const FdCloser&) = delete;

 private:
  int fd_;
};

}  // namespace

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
  const std::string path =
      "/proc/" + std::to_string(spec.opener->pid) + "/fd/" + std::to_string(spec.peer_fd);
  // Non-blocking: a FIFO behind the number would otherwise block the open
  // until a writer came. It is refused below (not a regular file).
  const int fd = open(path.c_str(), O_RDWR | O_CLOEXEC | O_NONBLOCK | O_NOCTTY);
  if (fd < 0) {
    return Status::NotFound("cannot open " + name + " (" + path + "): " + std::strerror(errno));
  }
  FdCloser closer(fd);
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    return Status::NotFound("cannot stat " + name + ": " + std::strerror(errno));
  }
  if (!S_ISREG(st.st_mode)) {
    return Status::NotFound(name + " is not a regular file (a memfd or shared-memory file)");
  }
  // Only shared-memory files (memfd, tmpfs) know seals: a file on disk would
  // page its bytes through the page cache and a filesystem.
  if (fcntl(fd, F_GET_SEALS) < 0) {
    return Status::NotFound(name + " is not a memfd or a shared-memory file");
  }
  if (spec.opener->uid != 0 && st.st_uid != spec.opener->uid) {
    return Status::NotFound(name + " belongs to uid " + std::to_string(st.st_uid) +
                            ", not to the peer's uid " + std::to_string(spec.opener->uid));
  }
  if (Status allowed = MayReadWrite(spec.opener, st.st_uid, st.st_gid, st.st_mode, name);
      !allowed.ok()) {
    return allowed;
  }
  if (spec.size_bytes == 0 || uint64_t(st.st_size) < spec.size_bytes) {
    return Status::OutOfRange(name + " holds " + std::to_string(st.st_size) + " bytes, not the " +
                              std::to_string(spec.size_bytes) + " bytes declared");
  }
  void* base = mmap(nullptr, spec.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of " + name + " failed: " + std::strerror(errno));
  }
  return std::shared_ptr<MappedAllocation>(std::make_shared<PeerFdAllocation>(
      static_cast<uint8_t*>(base), spec.size_bytes, name, names));
}

}  // namespace kvstash::backends
