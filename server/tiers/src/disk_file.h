// One chunk file of the disk tier: a 4 KiB block holding the ChunkHeader
// (zero-padded), then the payload padded with zeros to a 4 KiB multiple, so
// that every read and write is O_DIRECT-aligned. Internal to kvstash::tiers.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

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

// Block-aligned memory for O_DIRECT transfers; one per I/O thread.
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

// The scratch an I/O thread needs: a header block, a tail block and a
// bounce area for payloads that are not block-aligned in memory.
inline constexpr size_t kScratchBytes = 8u << 20;

// Creates `path` (which must not exist) holding the header and payload.
// `direct` asks for O_DIRECT; a file system that refuses it (tmpfs) gets
// buffered I/O. On error the file may be left partial: callers write to a
// temporary name and rename, and readers check sizes and checksums.
Status WriteChunkFile(const std::string& path, const ChunkHeader& header, const uint8_t* payload,
                      bool direct, AlignedBuffer& scratch);

// Reads the chunk at `path` into `payload` (expected.payload_bytes) and
// verifies it. NotFound when the file is absent, truncated, names another
// chunk or fails a checksum; Internal on an I/O error.
Result<ChunkHeader> ReadChunkFile(const std::string& path, const ChunkExpectation& expected,
                                  uint8_t* payload, bool direct, AlignedBuffer& scratch);

// The decoded header of a chunk file and the file's size and modification
// time, reading only the header block (the index rebuild).
struct ChunkFileInfo {
  ChunkHeader header;
  uint64_t file_bytes = 0;
  int64_t mtime_ns = 0;
};
Result<ChunkFileInfo> ReadChunkFileHeader(const std::string& path);

}  // namespace kvstash::tiers::internal
