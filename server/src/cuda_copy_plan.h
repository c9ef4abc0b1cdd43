// A batch's plan where the kernels read it: every group's layer addresses,
// the ChunkCopy entries and their block ids, built by the host in a pinned
// arena and uploaded with one small copy into device memory before the
// kernels run. Kernels reading their plan across PCIe would queue behind
// the bulk copies that share the link (and slow down with them).
//
// Owned by one copy lane and used by its thread only. A plan must not be
// rebuilt before the copies that read it have finished.
#pragma once

#include <cuda_runtime_api.h>

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
  // Lays out the groups' layer addresses, one entry per chunk whose flat
  // buffer is flats[i] (a device-accessible address) and the chunks' block
  // ids, all pointing into the device copy.
  Status Build(const std::vector<GroupAddresses>& groups,
               const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint8_t*>& flats);
  // Enqueues the upload of the last plan built; kernels after it on
  // `stream` may read it.
  Status Upload(cudaStream_t stream) const;
  // Group g of the last plan built, its layer addresses in device memory.
  kernels::DeviceGroupCopy Group(size_t g) const;
  // Chunks [begin, begin + count) of the last plan built.
  kernels::DeviceChunkBatch Slice(size_t begin, size_t count) const;
  uint64_t device_bytes() const { return device_.size(); }  // GPU memory

 private:
  cuda::PinnedHostBuffer host_;  // built here...
  cuda::DeviceBuffer device_;    // ...read by the kernels here
  uint64_t used_bytes_ = 0;
  uint64_t entries_offset_ = 0;
  std::vector<kernels::GroupCopy> groups_;
  std::vector<uint64_t> group_bases_offsets_;
};

}  // namespace kvstash::server
