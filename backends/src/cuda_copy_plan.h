// What the kernels of one copy read, split by how long it lives:
//   LayerAddresses  every group's layer addresses of one registration,
//                   uploaded to the GPU at its first copy and kept (a lane
//                   caches them by registration id), so that a request
//                   uploads only its own entries; with them what the
//                   kernels derive from a group alone, checked once. A
//                   layer range is a slice of them (pointer arithmetic),
//                   not a new upload.
//   CopyPlan        one request's ChunkCopy entries and block ids, built by
//                   the host in a pinned arena and uploaded with one small
//                   copy before the kernels run. Kernels reading their plan
//                   across PCIe would queue behind the bulk copies that
//                   share the link (and slow down with them).
//
// Owned by one copy lane and used by its thread only. Neither may change
// before the copies that read it have finished.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <vector>

#include "kvstash/backends/backend.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/kernels/chunk_copy_cuda.h"

namespace kvstash::backends {

class LayerAddresses {
 public:
  // Copies every group's layer addresses to the GPU (waits for the upload)
  // and prepares each group for the kernels (kernels::PrepareGroup): a
  // group they cannot copy is refused here, before any launch.
  static Result<LayerAddresses> Upload(const std::vector<GroupAddresses>& groups,
                                       cudaStream_t stream);
  // Layers [first, first + count) of group g, as a kernel reads them.
  kernels::PreparedGroup Slice(size_t g, uint32_t first, uint32_t count) const {
    return groups_[g].Layers(first, count);
  }
  uint64_t device_bytes() const { return device_.size(); }

 private:
  cuda::DeviceBuffer device_;
  std::vector<kernels::PreparedGroup> groups_;  // pointing into device_
};

class CopyPlan {
 public:
  // Lays out one entry per chunk whose flat buffer is flats[i] (a
  // device-accessible address) and the chunks' block ids, all pointing
  // into the device copy.
  Status Build(const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint8_t*>& flats);
  // Enqueues the upload of the last plan built; kernels after it on
  // `stream` may read it.
  Status Upload(cudaStream_t stream) const;
  // Chunks [begin, begin + count) of the last plan built.
  kernels::DeviceChunkBatch Slice(size_t begin, size_t count) const;
  uint64_t device_bytes() const { return device_.size(); }  // GPU memory

 private:
  cuda::PinnedHostBuffer host_;  // built here...
  cuda::DeviceBuffer device_;    // ...read by the kernels here
  uint64_t used_bytes_ = 0;
};

}  // namespace kvstash::backends
