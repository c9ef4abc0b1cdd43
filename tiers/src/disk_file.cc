// Chunk files: aligned header + payload, written and read with O_DIRECT.
#include "disk_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

namespace kvstash::tiers::internal {
namespace {

// Closes a file descriptor when it goes out of scope.
class Fd {
 public:
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() {
    if (fd_ >= 0) ::close(fd_);
  }
  Fd(const Fd&) = delete;
  Fd& operator=(const Fd&) = delete;
  int get() const { return fd_; }

 private:
  int fd_;
};

std::string Errno(const std::string& what, const std::string& path) {
  return what + " " + path + ": " + std::strerror(errno);
}

bool Aligned(const void* p) { return reinterpret_cast<uintptr_t>(p) % kDiskBlockBytes == 0; }

// Opens with O_DIRECT when asked and the file system allows it.
int OpenMaybeDirect(const std::string& path, int flags, bool direct) {
  if (direct) {
    const int fd = ::open(path.c_str(), flags | O_DIRECT | O_CLOEXEC, 0640);
    if (fd >= 0 || errno != EINVAL) return fd;
  }
  return ::open(path.c_str(), flags | O_CLOEXEC, 0640);
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(RoundUpToBlock(bytes)) {
  void* p = std::aligned_alloc(kDiskBlockBytes, size_);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<uint8_t*>(p));
}

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

void PrepareChunkWrite(const ChunkHeader& header, const uint8_t* payload, ChunkFileIo& io) {
  uint8_t* header_block = io.blocks.data();
  uint8_t* tail_block = io.blocks.data() + kDiskBlockBytes;
  std::memset(header_block, 0, kDiskBlockBytes);
  EncodeChunkHeader(header, header_block);
  const uint64_t size = header.payload_bytes;
  const uint64_t body = size / kDiskBlockBytes * kDiskBlockBytes;  // whole blocks
  const uint64_t tail = size - body;
  io.iov = {{header_block, kDiskBlockBytes}};
  if (!Aligned(payload) && size > 0) {
    // Not aligned in memory: one aligned copy, zero-padded.
    io.bounce = std::make_unique<AlignedBuffer>(size);
    std::memcpy(io.bounce->data(), payload, size);
    std::memset(io.bounce->data() + size, 0, io.bounce->size() - size);
    io.iov.push_back({io.bounce->data(), io.bounce->size()});
  } else {
    if (body > 0) io.iov.push_back({const_cast<uint8_t*>(payload), body});
    if (tail > 0) {
      std::memcpy(tail_block, payload + body, tail);
      std::memset(tail_block + tail, 0, kDiskBlockBytes - tail);
      io.iov.push_back({tail_block, kDiskBlockBytes});
    }
  }
  io.bytes = ChunkFileBytes(size);
}

void PrepareChunkRead(uint64_t payload_bytes, uint8_t* payload, ChunkFileIo& io) {
  const uint64_t body = payload_bytes / kDiskBlockBytes * kDiskBlockBytes;
  const uint64_t tail = payload_bytes - body;
  io.iov = {{io.blocks.data(), kDiskBlockBytes}};
  if (!Aligned(payload) && payload_bytes > 0) {
    io.bounce = std::make_unique<AlignedBuffer>(payload_bytes);
    io.iov.push_back({io.bounce->data(), io.bounce->size()});
  } else {
    if (body > 0) io.iov.push_back({payload, body});
    if (tail > 0) io.iov.push_back({io.blocks.data() + kDiskBlockBytes, kDiskBlockBytes});
  }
  io.bytes = ChunkFileBytes(payload_bytes);
}

Result<ChunkHeader> FinishChunkRead(const std::string& path, const ChunkExpectation& expected,
                                    uint8_t* payload, ChunkFileIo& io, int64_t moved) {
  if (moved < 0) {
    return Status::Internal("cannot read " + path + ": " + std::strerror(static_cast<int>(-moved)));
  }
  if (static_cast<uint64_t>(moved) != io.bytes) {
    return Status::NotFound("chunk file " + path + " was truncated while read");
  }
  Result<ChunkHeader> header = DecodeChunkHeader(io.blocks.data(), kDiskBlockBytes);
  if (!header.ok())
    return Status::NotFound("chunk file " + path + ": " + header.status().message());
  Status check = CheckChunkHeader(*header, expected);
  if (!check.ok()) return Status::NotFound("chunk file " + path + ": " + check.message());
  const uint64_t size = expected.payload_bytes;
  const uint64_t body = size / kDiskBlockBytes * kDiskBlockBytes;
  if (io.bounce) {
    std::memcpy(payload, io.bounce->data(), size);
  } else if (size > body) {
    std::memcpy(payload + body, io.blocks.data() + kDiskBlockBytes, size - body);
  }
  Status verified = VerifyChunk(*header, expected, payload, size);
  if (!verified.ok()) return Status::NotFound("chunk file " + path + ": " + verified.message());
  return header;
}

Result<int> CreateChunkFile(const std::string& path, bool direct) {
  const int fd = OpenMaybeDirect(path, O_WRONLY | O_CREAT | O_EXCL, direct);
  if (fd < 0) return Status::Internal(Errno("cannot create", path));
  return fd;
}

Result<int> OpenChunkFile(const std::string& path, uint64_t file_bytes, bool direct) {
  const int fd = OpenMaybeDirect(path, O_RDONLY, direct);
  if (fd < 0) {
    if (errno == ENOENT) return Status::NotFound("chunk file " + path + " is gone");
    return Status::Internal(Errno("cannot open", path));
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    Status error = Status::Internal(Errno("cannot stat", path));
    ::close(fd);
    return error;
  }
  if (static_cast<uint64_t>(st.st_size) != file_bytes) {
    ::close(fd);
    return Status::NotFound("chunk file " + path + " has " + std::to_string(st.st_size) +
                            " bytes, its chunk needs " + std::to_string(file_bytes));
  }
  return fd;
}

Result<ChunkFileInfo> ReadChunkFileHeader(const std::string& path) {
  // Buffered: one 4 KiB read per file, and the page cache may already hold
  // it after a restart of the daemon (not of the machine).
  // O_NOATIME spares a metadata write per file; only the owner may ask.
  int raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC | O_NOATIME);
  if (raw < 0 && errno == EPERM) raw = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  Fd fd(raw);
  if (fd.get() < 0) return Status::NotFound(Errno("cannot open", path));
  uint8_t block[kChunkHeaderBytes];
  const ssize_t n = ::pread(fd.get(), block, sizeof(block), 0);
  if (n != static_cast<ssize_t>(sizeof(block))) {
    return Status::NotFound("chunk file " + path + " is shorter than its header");
  }
  Result<ChunkHeader> header = DecodeChunkHeader(block, sizeof(block));
  if (!header.ok())
    return Status::NotFound("chunk file " + path + ": " + header.status().message());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::Internal(Errno("cannot stat", path));
  ChunkFileInfo info;
  info.header = *header;
  info.file_bytes = static_cast<uint64_t>(st.st_size);
  info.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

}  // namespace kvstash::tiers::internal
