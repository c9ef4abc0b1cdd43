// Batched CUDA gather/scatter: many chunks and every layer of one group in a
// single launch. No CUDA types here (the stream is a void*), so code that
// builds plans needs no CUDA headers. Exists where KVSTASH_HAVE_CUDA is 1.
//
// A launch reads its plan twice: the launcher on the host (checks, access
// width) and the kernel on the device; what belongs to the group alone is
// read once, by PrepareGroup. Each plan array is therefore given
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

// What a launch knows of one group before any request comes: the group
// checked (counts, shape, layer bases: what GatherChunksCpu checks of it),
// its packed heads merged, the alignment that its strides and layer bases
// allow, and its tiling. PrepareGroup derives it once, when a registration's
// layer addresses are uploaded, so that a launch checks and derives only
// what its chunks bring.
struct PreparedGroup {
  GroupCopy group;                     // heads merged; layer_bases is null:
                                       // launches read only the device view
  uint8_t* const* device_layer_bases;  // [group.shape.num_layers], device-readable
  uint64_t alignment_bits;             // OR of head bytes, the strides a copy steps by and every
                                       // layer base (AccessWidthBytes without the flat addresses)
  uint32_t tile_tokens;                // tokens one CTA copies
  uint32_t num_tiles;                  // tiles of a (chunk, layer, kv) row

  // Layers [first, first + count) of the group, as a layer range's launch
  // reads them. The alignment stays the whole group's: never wider than a
  // layer allows, so the bytes copied are the same.
  PreparedGroup Layers(uint32_t first, uint32_t count) const {
    PreparedGroup out = *this;
    out.group = GroupLayers(group, first, count);
    out.device_layer_bases = device_layer_bases + first;
    return out;
  }
};

// InvalidArgument for a group that GatherChunksCpu rejects, whose tokens
// exceed the kernels' 4 GiB, or whose device view of layer_bases is null.
// Reads group.group.layer_bases (host-readable) here only.
Result<PreparedGroup> PrepareGroup(const DeviceGroupCopy& group);

// GatherChunksCpu on the GPU, enqueued on `stream` (a cudaStream_t; null is
// the legacy default stream). Returns once the kernel is enqueued: the device
// views, block ids and buffers must stay valid until the stream passes it.
// InvalidArgument for chunks that GatherChunksCpu rejects, DeviceError if
// the launch fails. Block ids must already be checked against num_blocks.
// max_ctas (0: none) caps the grid, each CTA then walking several tiles, so
// that kernels of other streams find SMs free (direct mode: a store's and a
// retrieve's kernels over mapped host memory run side by side).
Status GatherChunks(const PreparedGroup& group, const DeviceChunkBatch& batch, void* stream,
                    uint32_t max_ctas = 0);

// ScatterChunksCpu on the GPU; same contract as GatherChunks. Writes only
// tokens [skip_tokens, num_tokens) of the named blocks.
Status ScatterChunks(const PreparedGroup& group, const DeviceChunkBatch& batch, void* stream,
                     uint32_t max_ctas = 0);

}  // namespace kvstash::kernels
