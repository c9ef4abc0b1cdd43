// POSIX shared memory regions for the host backend.
#include "kvstash/host_memory.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>

namespace kvstash {

namespace {

std::string ErrnoText(int error) { return std::strerror(error); }

// Opens a fresh shm object with a name no other live one has.
Result<std::pair<std::string, int>> OpenUnique(mode_t mode) {
  static std::atomic<uint64_t> counter{0};
  for (int attempt = 0; attempt < 64; ++attempt) {
    std::string name =
        "/kvstash-" + std::to_string(::getpid()) + "-" + std::to_string(counter.fetch_add(1));
    int fd = ::shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, mode);
    if (fd >= 0) return std::make_pair(std::move(name), fd);
    // A previous process with our pid may have left one behind; try the next.
    if (errno != EEXIST) {
      return Status::Unavailable("shm_open(" + name + ") failed: " + ErrnoText(errno));
    }
  }
  return Status::Unavailable("shm_open found 64 existing /kvstash-" + std::to_string(::getpid()) +
                             "-* objects in a row");
}

}  // namespace

Result<HostKvMemory> HostKvMemory::Create(uint64_t size_bytes, mode_t mode) {
  if (size_bytes == 0) return Status::InvalidArgument("shared memory size must be positive");
  auto opened = OpenUnique(mode);
  if (!opened.ok()) return opened.status();
  // Named, not structured bindings: C++17 lambdas cannot capture those.
  std::string name = std::move(opened->first);
  const int fd = opened->second;
  auto fail = [&](const std::string& what) {
    const int error = errno;
    ::close(fd);
    ::shm_unlink(name.c_str());
    return Status::Unavailable(what + " for " + name + " (" + std::to_string(size_bytes) +
                               " bytes) failed: " + ErrnoText(error));
  };
  // The umask may have cleared group bits; the caller asked for these.
  if (::fchmod(fd, mode) != 0) return fail("fchmod");
  if (::ftruncate(fd, off_t(size_bytes)) != 0) return fail("ftruncate");
  void* data = ::mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (data == MAP_FAILED) return fail("mmap");
  ::close(fd);  // the mapping keeps the object alive
  return HostKvMemory(std::move(name), static_cast<uint8_t*>(data), size_bytes);
}

HostKvMemory::HostKvMemory(HostKvMemory&& other) noexcept
    : name_(std::move(other.name_)), data_(other.data_), size_bytes_(other.size_bytes_) {
  other.name_.clear();
  other.data_ = nullptr;
  other.size_bytes_ = 0;
}

HostKvMemory& HostKvMemory::operator=(HostKvMemory&& other) noexcept {
  if (this != &other) {
    Reset();
    name_ = std::move(other.name_);
    data_ = other.data_;
    size_bytes_ = other.size_bytes_;
    other.name_.clear();
    other.data_ = nullptr;
    other.size_bytes_ = 0;
  }
  return *this;
}

HostKvMemory::~HostKvMemory() { Reset(); }

void HostKvMemory::Reset() {
  if (data_ != nullptr) ::munmap(data_, size_bytes_);
  if (!name_.empty()) ::shm_unlink(name_.c_str());
  data_ = nullptr;
  size_bytes_ = 0;
  name_.clear();
}

}  // namespace kvstash
