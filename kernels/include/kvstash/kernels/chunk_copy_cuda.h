// Batched CUDA gather/scatter: many chunks and every layer of one group in a
// single launch. No CUDA types here (the stream is a void*), so code that
// builds plans needs no CUDA headers. Exists where KVSTASH_HAVE_CUDA is 1.
//
// A launch reads its plan twice: the launcher on the host (checks, access
// width) and the kernel on the device. Each plan array is therefore given
// twice: a host-readable view and the same bytes where the device can read
// them. Pinned host memory from cudaHostAlloc(cudaHostAllocMapped) is both
// (pass its cudaHostGetDevicePointer as the device view); a plan uploaded to
// device memory keeps its host original as the host view.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/kernels/chunk_copy.h"
#include "kvstash/status.h"

namespace kvstash::kernels {

// One group of layers living in GPU memory.
struct DeviceGroupCopy {
  GroupCopy group;                     // layer_bases: host-readable [num_layers]
                                       // array of device addresses
  uint8_t* const* device_layer_bases;  // the same array, device-readable
};

// The chunks of one launch. In each ChunkCopy, `flat` and `block_ids` are
// device-accessible addresses: `flat` in a device staging buffer (`dma` mode)
// or in mapped pinned host memory (`direct` mode); the kernels do not care.
struct DeviceChunkBatch {
  const ChunkCopy* chunks;         // host-readable [num_chunks]
  const ChunkCopy* device_chunks;  // the same entries, device-readable
  size_t num_chunks;
};

// GatherChunksCpu on the GPU, enqueued on `stream` (a cudaStream_t; null is
// the legacy default stream). Returns once the kernel is enqueued: the device
// views, block ids and buffers must stay valid until the stream passes it.
// InvalidArgument for what GatherChunksCpu rejects, DeviceError if the launch
// fails. Block ids must already be checked against num_blocks. max_ctas
// (0: none) caps the grid, each CTA then walking several tiles, so that
// kernels of other streams find SMs free (direct mode: a store's and a
// retrieve's kernels over mapped host memory run side by side).
Status GatherChunks(const DeviceGroupCopy& group, const DeviceChunkBatch& batch, void* stream,
                    uint32_t max_ctas = 0);

// ScatterChunksCpu on the GPU; same contract as GatherChunks. Writes only
// tokens [skip_tokens, num_tokens) of the named blocks.
Status ScatterChunks(const DeviceGroupCopy& group, const DeviceChunkBatch& batch, void* stream,
                     uint32_t max_ctas = 0);

}  // namespace kvstash::kernels
