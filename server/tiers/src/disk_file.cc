// Chunk files: aligned header + payload, written and read with O_DIRECT.
#include "disk_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <climits>
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

// pwritev/preadv until every byte moved. Returns the bytes moved: fewer than
// asked only when a read reached the end of the file. -1 on an error.
ssize_t FullTransfer(bool write, int fd, std::vector<iovec> iov, off_t offset) {
  size_t done = 0;
  size_t first = 0;
  while (first < iov.size()) {
    const int count = static_cast<int>(std::min<size_t>(iov.size() - first, IOV_MAX));
    const ssize_t n = write ? ::pwritev(fd, &iov[first], count, offset)
                            : ::preadv(fd, &iov[first], count, offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -1;
    }
    if (n == 0) return static_cast<ssize_t>(done);  // end of file
    done += static_cast<size_t>(n);
    offset += n;
    size_t left = static_cast<size_t>(n);
    while (first < iov.size() && left >= iov[first].iov_len) left -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + left;
      iov[first].iov_len -= left;
    }
  }
  return static_cast<ssize_t>(done);
}

size_t TotalBytes(const std::vector<iovec>& iov) {
  size_t total = 0;
  for (const iovec& v : iov) total += v.iov_len;
  return total;
}

}  // namespace

AlignedBuffer::AlignedBuffer(size_t bytes) : size_(RoundUpToBlock(bytes)) {
  void* p = std::aligned_alloc(kDiskBlockBytes, size_);
  if (p == nullptr) throw std::bad_alloc();
  data_.reset(static_cast<uint8_t*>(p));
}

void AlignedBuffer::Free::operator()(uint8_t* p) const { std::free(p); }

Status WriteChunkFile(const std::string& path, const ChunkHeader& header, const uint8_t* payload,
                      bool direct, AlignedBuffer& scratch) {
  Fd fd(OpenMaybeDirect(path, O_WRONLY | O_CREAT | O_EXCL, direct));
  if (fd.get() < 0) return Status::Internal(Errno("cannot create", path));

  // scratch: [header block][tail block][bounce area ...]
  uint8_t* header_block = scratch.data();
  uint8_t* tail_block = scratch.data() + kDiskBlockBytes;
  uint8_t* bounce = scratch.data() + 2 * kDiskBlockBytes;
  const size_t bounce_bytes = scratch.size() - 2 * kDiskBlockBytes;
  std::memset(header_block, 0, kDiskBlockBytes);
  EncodeChunkHeader(header, header_block);

  const uint64_t size = header.payload_bytes;
  const uint64_t body = size / kDiskBlockBytes * kDiskBlockBytes;  // whole blocks
  const uint64_t tail = size - body;
  std::vector<iovec> iov{{header_block, kDiskBlockBytes}};
  if (Aligned(payload)) {
    if (body > 0) iov.push_back({const_cast<uint8_t*>(payload), body});
  } else {
    // Not aligned in memory: the header goes first, then the body through
    // the bounce area, piece by piece.
    if (FullTransfer(true, fd.get(), iov, 0) != static_cast<ssize_t>(kDiskBlockBytes)) {
      return Status::Internal(Errno("cannot write", path));
    }
    iov.clear();
    for (uint64_t done = 0; done < body;) {
      const uint64_t piece = std::min<uint64_t>(bounce_bytes, body - done);
      std::memcpy(bounce, payload + done, piece);
      if (FullTransfer(true, fd.get(), {{bounce, piece}}, off_t(kDiskBlockBytes + done)) !=
          static_cast<ssize_t>(piece)) {
        return Status::Internal(Errno("cannot write", path));
      }
      done += piece;
    }
  }
  if (tail > 0) {
    std::memcpy(tail_block, payload + body, tail);
    std::memset(tail_block + tail, 0, kDiskBlockBytes - tail);
    iov.push_back({tail_block, kDiskBlockBytes});
  }
  if (!iov.empty()) {
    // With a bounced body only the tail is left, at its own offset.
    const off_t offset = iov.front().iov_base == header_block ? 0 : off_t(kDiskBlockBytes + body);
    if (FullTransfer(true, fd.get(), iov, offset) != static_cast<ssize_t>(TotalBytes(iov))) {
      return Status::Internal(Errno("cannot write", path));
    }
  }
  return Status::Ok();
}

Result<ChunkHeader> ReadChunkFile(const std::string& path, const ChunkExpectation& expected,
                                  uint8_t* payload, bool direct, AlignedBuffer& scratch) {
  Fd fd(OpenMaybeDirect(path, O_RDONLY, direct));
  if (fd.get() < 0) {
    if (errno == ENOENT) return Status::NotFound("chunk file " + path + " is gone");
    return Status::Internal(Errno("cannot open", path));
  }
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::Internal(Errno("cannot stat", path));
  const uint64_t want = ChunkFileBytes(expected.payload_bytes);
  if (static_cast<uint64_t>(st.st_size) != want) {
    return Status::NotFound("chunk file " + path + " has " + std::to_string(st.st_size) +
                            " bytes, a chunk of " + std::to_string(expected.payload_bytes) +
                            " payload bytes needs " + std::to_string(want));
  }
  uint8_t* header_block = scratch.data();
  uint8_t* tail_block = scratch.data() + kDiskBlockBytes;
  uint8_t* bounce = scratch.data() + 2 * kDiskBlockBytes;
  const size_t bounce_bytes = scratch.size() - 2 * kDiskBlockBytes;
  const uint64_t size = expected.payload_bytes;
  const uint64_t body = size / kDiskBlockBytes * kDiskBlockBytes;
  const uint64_t tail = size - body;

  std::vector<iovec> iov{{header_block, kDiskBlockBytes}};
  const bool aligned = Aligned(payload);
  if (aligned && body > 0) iov.push_back({payload, body});
  if (aligned && tail > 0) iov.push_back({tail_block, kDiskBlockBytes});
  const ssize_t got = FullTransfer(false, fd.get(), iov, 0);
  if (got < 0) return Status::Internal(Errno("cannot read", path));
  if (static_cast<size_t>(got) != TotalBytes(iov)) {
    return Status::NotFound("chunk file " + path + " was truncated while read");
  }
  Result<ChunkHeader> header = DecodeChunkHeader(header_block, kDiskBlockBytes);
  if (!header.ok()) return Status::NotFound("chunk file " + path + ": " + header.status().message());
  Status check = CheckChunkHeader(*header, expected);
  if (!check.ok()) return Status::NotFound("chunk file " + path + ": " + check.message());
  if (!aligned) {
    const uint64_t padded = RoundUpToBlock(size);
    for (uint64_t done = 0; done < padded;) {
      const uint64_t piece = std::min<uint64_t>(bounce_bytes, padded - done);
      const ssize_t n = FullTransfer(false, fd.get(), {{bounce, piece}}, off_t(kDiskBlockBytes + done));
      if (n < 0) return Status::Internal(Errno("cannot read", path));
      if (static_cast<uint64_t>(n) != piece) {
        return Status::NotFound("chunk file " + path + " was truncated while read");
      }
      std::memcpy(payload + done, bounce, std::min<uint64_t>(piece, size - done));
      done += piece;
    }
  } else if (tail > 0) {
    std::memcpy(payload + body, tail_block, tail);
  }
  Status verified = VerifyChunk(*header, expected, payload, size);
  if (!verified.ok()) return Status::NotFound("chunk file " + path + ": " + verified.message());
  return header;
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
  if (!header.ok()) return Status::NotFound("chunk file " + path + ": " + header.status().message());
  struct stat st {};
  if (::fstat(fd.get(), &st) != 0) return Status::Internal(Errno("cannot stat", path));
  ChunkFileInfo info;
  info.header = *header;
  info.file_bytes = static_cast<uint64_t>(st.st_size);
  info.mtime_ns = int64_t{st.st_mtim.tv_sec} * 1000000000 + st.st_mtim.tv_nsec;
  return info;
}

}  // namespace kvstash::tiers::internal
