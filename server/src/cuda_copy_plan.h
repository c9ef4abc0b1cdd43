// A batch's plan where the kernels read it: ChunkCopy entries and their block
// ids in pinned host memory mapped into the device (cudaHostAlloc mapped),
// written by the host and read by the kernels, grown as batches need.
//
// Owned by one copy lane and used by its thread only. A plan must not be
// rebuilt before the copies that read it have finished.
#pragma once

#include <cstdint>
#include <vector>

#include "backend.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/kernels/chunk_copy_cuda.h"

namespace kvstash::server {

// Bytes of one flat chunk of these groups (the layout's chunk_bytes).
uint64_t FlatChunkBytes(const std::vector<GroupAddresses>& groups);

class CopyPlan {
 public:
  // Copies the chunks' block ids into the arena and writes one entry per
  // chunk whose flat buffer is flats[i] (a device-accessible address).
  Status Build(const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint8_t*>& flats);
  // Chunks [begin, begin + count) of the last plan built.
  kernels::DeviceChunkBatch Slice(size_t begin, size_t count) const;
  uint64_t arena_bytes() const { return arena_.size(); }

 private:
  cuda::PinnedHostBuffer arena_;
};

}  // namespace kvstash::server
