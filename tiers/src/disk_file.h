// One chunk file of the disk tier: a 4 KiB block holding the ChunkHeader
// (zero-padded), then the payload padded with zeros to a 4 KiB multiple, so
// that every read and write is O_DIRECT-aligned. Internal to kvstash::tiers.
#pragma once

#include <sys/uio.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/status.h"
#include "kvstash/tiers/chunk_header.h"

namespace kvstash::tiers::internal {

inline constexpr uint64_t kDiskBlockBytes = 4096;

inline uint64_t RoundUpToBlock(uint64_t bytes) {
  return (bytes + kDiskBlockBytes - 1) / kDiskBlockBytes * kDiskBlockBytes;
}
// Size of the file that holds a chunk of `payload_bytes`.
inline uint64_t ChunkFileBytes(uint64_t payload_bytes) {
  return kDiskBlockBytes + RoundUpToBlock(payload_bytes);
}

// Block-aligned memory for O_DIRECT transfers.
class AlignedBuffer {
 public:
  explicit AlignedBuffer(size_t bytes);
  uint8_t* data() const { return data_.get(); }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const;
  };
  std::unique_ptr<uint8_t, Free> data_;
  size_t size_;
};

// One chunk file's transfer, prepared here and moved by the I/O engine: the
// whole file from offset 0 as buffers. The header and tail blocks live
// here, and so does a bounce copy of a payload that is not block-aligned in
// memory (O_DIRECT needs aligned buffers). Must outlive the transfer.
struct ChunkFileIo {
  ChunkFileIo() : blocks(2 * kDiskBlockBytes) {}
  AlignedBuffer blocks;  // [header block][tail block]
  std::unique_ptr<AlignedBuffer> bounce;
  std::vector<iovec> iov;
  uint64_t bytes = 0;  // the file's size: what iov covers
};

// The buffers that write `header` and `payload` (header.payload_bytes).
void PrepareChunkWrite(const ChunkHeader& header, const uint8_t* payload, ChunkFileIo& io);
// The buffers that read a chunk of `payload_bytes` into `payload`.
void PrepareChunkRead(uint64_t payload_bytes, uint8_t* payload, ChunkFileIo& io);
// After the read moved `moved` bytes (or failed, negative errno): checks
// the header against `expected`, copies the tail (or the bounce copy) into
// `payload` and verifies its checksum. NotFound when the file was
// truncated, names another chunk or fails a check; Internal on an I/O error.
Result<ChunkHeader> FinishChunkRead(const std::string& path, const ChunkExpectation& expected,
                                    uint8_t* payload, ChunkFileIo& io, int64_t moved);

// Creates `path` (which must not exist) and returns its descriptor.
// `direct` asks for O_DIRECT; a file system that refuses it (tmpfs) gets
// buffered I/O. No fallocate: each file takes one write, so extending
// writes never queue behind each other on an inode, and measured on ext4
// it was no faster (bench/history/2026-11-22.md).
Result<int> CreateChunkFile(const std::string& path, bool direct);
// Opens a chunk file for reading; NotFound when absent or not of
// `file_bytes`. Returns the descriptor.
Result<int> OpenChunkFile(const std::string& path, uint64_t file_bytes, bool direct);

// The decoded header of a chunk file and the file's size and modification
// time, reading only the header block (the index rebuild).
struct ChunkFileInfo {
  ChunkHeader header;
  uint64_t file_bytes = 0;
  int64_t mtime_ns = 0;
};
Result<ChunkFileInfo> ReadChunkFileHeader(const std::string& path);

}  // namespace kvstash::tiers::internal
