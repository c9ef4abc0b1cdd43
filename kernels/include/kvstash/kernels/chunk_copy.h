// Gather (paged engine blocks -> flat chunk) and scatter (flat chunk -> paged
// engine blocks) for one batch of chunks and one group of layers. This header
// has no CUDA types: the CPU twins run in the host backend and in tests, and
// the CUDA launchers (chunk_copy_cuda.h) take the same descriptions.
#pragma once

#include <cstddef>
#include <cstdint>

#include "kvstash/chunk_layout.h"
#include "kvstash/geometry.h"
#include "kvstash/status.h"

namespace kvstash::kernels {

// One group of layers in one address space (host memory for the CPU twins,
// device memory for the CUDA kernels).
struct GroupCopy {
  LayerGeometry geometry;       // shared by every layer of the group
  FlatGroupShape shape;         // the group inside the flat chunk
  uint64_t flat_offset_bytes;   // group offset inside the flat chunk
  uint8_t* const* layer_bases;  // [shape.num_layers] engine layer base addresses
};

// One chunk of the batch.
struct ChunkCopy {
  uint8_t* flat;              // chunk buffer of layout.chunk_bytes()
  const uint32_t* block_ids;  // [num_block_ids] engine blocks, token t of the
                              // chunk lives in block_ids[t / block_tokens]
  uint32_t num_block_ids;     // >= ceil(num_tokens / block_tokens)
  uint32_t num_tokens;        // valid tokens in the chunk (<= chunk_tokens)
  uint32_t skip_tokens;       // scatter only: leading tokens not written
};

// Layers [first, first + count) of `group` (first + count <= its
// num_layers): its flat window and, where set, its layer bases, moved on by
// `first` layers. A layer range is copied as this group.
inline GroupCopy GroupLayers(GroupCopy group, uint32_t first, uint32_t count) {
  group.flat_offset_bytes += uint64_t{first} * FlatLayerBytes(group.shape);
  group.shape.num_layers = count;
  if (group.layer_bases != nullptr) group.layer_bases += first;
  return group;
}

// A group as the CPU twins copy it: checked (counts, shape, layer bases) and
// its packed heads merged, once, so that a copy checks only its chunks. The
// CPU counterpart of PreparedGroup (chunk_copy_cuda.h). Made by
// PrepareGroupCpu alone, so holding one means the group passed. It points at
// the caller's layer_bases array, which must outlive it. Cheap to copy;
// immutable, so any number of threads may copy through one at once.
class PreparedCpuGroup {
 public:
  // Heads merged: the bytes addressed are the group's, in longer runs.
  const GroupCopy& group() const { return group_; }

  // Layers [first, first + count) of the group, as a task that copies a
  // layer range reads them: no check again, the facts are the group's.
  // Requires first + count <= group().shape.num_layers.
  PreparedCpuGroup Layers(uint32_t first, uint32_t count) const {
    return PreparedCpuGroup(GroupLayers(group_, first, count));
  }

 private:
  friend Result<PreparedCpuGroup> PrepareGroupCpu(const GroupCopy& group);
  explicit PreparedCpuGroup(const GroupCopy& merged) : group_(merged) {}
  GroupCopy group_;
};

// InvalidArgument for a group the CPU twins cannot copy: a zero count, a flat
// shape that disagrees with the geometry, a null layer base.
Result<PreparedCpuGroup> PrepareGroupCpu(const GroupCopy& group);

// Copies tokens [0, num_tokens) of every chunk from the paged layers into the
// flat buffer and writes zeros over tokens [num_tokens, chunk_tokens) of every
// (layer, kv) row, so a partial chunk never carries stale bytes. Block ids must
// already be checked against geometry.num_blocks by the caller. Checks only
// the chunks (InvalidArgument, and nothing written, for a bad one).
Status GatherChunksCpu(const PreparedCpuGroup& group, const ChunkCopy* chunks, size_t num_chunks);

// Copies tokens [skip_tokens, num_tokens) of every chunk from the flat buffer
// into the paged layers. Never writes a token outside that range, nor a block
// not named in block_ids. Checks only the chunks, as GatherChunksCpu.
Status ScatterChunksCpu(const PreparedCpuGroup& group, const ChunkCopy* chunks, size_t num_chunks);

// PrepareGroupCpu, then the copy above: for callers that copy a group once.
Status GatherChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);
Status ScatterChunksCpu(const GroupCopy& group, const ChunkCopy* chunks, size_t num_chunks);

}  // namespace kvstash::kernels
