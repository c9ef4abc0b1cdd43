// The copies of one (GPU, direction): what a CUDA backend's lane thread
// calls. It owns the lane's resources (cuda_lane_core.h) and its two kinds
// of copy: over this GPU's own link alone (cuda_single_path_copy.h), and
// with other GPUs carrying part of it over NVLink (cuda_multipath_copy.h).
// A copy leaves out the chunks past their deadline, goes to whichever kind
// takes it, writes a store's done slot, and returns once every byte has
// arrived.
//
// Only its lane thread calls Copy, so nothing here needs a lock.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "cuda_lane_core.h"
#include "cuda_multipath_copy.h"
#include "cuda_single_path_copy.h"
#include "kvstash/backends/backend.h"

namespace kvstash::backends {

class CudaCopyLane {
 public:
  using Options = CudaLaneCore::Options;
  static Result<std::unique_ptr<CudaCopyLane>> Create(const Options& options);

  // Multi-path copies: the GPUs that may carry part of this lane's copies.
  using Relays = CudaMultipathCopy::Relays;
  // Set once, before the first Copy; without it every copy has one path.
  void SetRelays(Relays relays) { multipath_.SetRelays(std::move(relays)); }

  // Chunks past their deadline are left out before anything is enqueued;
  // in dma mode each sub-batch (with relays, each batch) is checked again
  // before it is enqueued, and once one is past, it and the rest are left
  // out (deadlines.missed).
  // With a signal (may be null): a store's done slot is written after the
  // last gather of every path (its gate was open before the store reached
  // the lane); a retrieve writes each layer range's slot after that range's
  // scatter (cuStreamWriteValue32). slabs[i]: chunk i's L1 slab; adjacent
  // slots are copied as one only inside one slab (each slab is pinned on
  // its own).
  Status Copy(const CopyLayout& layout, const std::vector<kernels::ChunkCopy>& chunks,
              const std::vector<uint32_t>& slabs, CopyDeadlines& deadlines,
              const CopySignal* signal);

  uint64_t staging_bytes() const { return core_->staging_bytes(); }
  // The plan arena and the cached layer addresses on the GPU (the arena
  // takes as much pinned host memory again).
  uint64_t plan_bytes() const { return core_->plan_bytes(); }
  // Copies (of this lane's direction) that more than one path carried.
  uint64_t multipath_copies() const { return multipath_.copies(); }

 private:
  explicit CudaCopyLane(std::unique_ptr<CudaLaneCore> core)
      : core_(std::move(core)), single_(*core_), multipath_(*core_, single_) {}
  // Direct mode: the copy over every path that reaches the engine's memory.
  Status CopyDirect(const CopyLayout& layout, const LayerAddresses& addresses,
                    const std::vector<kernels::ChunkCopy>& chunks, const CopySignal* signal);
  // dma mode: the copy through the staging ring, with relays where the
  // policy takes some; *stopped_at: where a deadline stopped it.
  Status CopyThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                            const std::vector<kernels::ChunkCopy>& chunks,
                            const std::vector<uint32_t>& slabs, const CopySignal* signal,
                            const Expired& expired, size_t* stopped_at);

  const std::unique_ptr<CudaLaneCore> core_;
  CudaSinglePathCopy single_;
  CudaMultipathCopy multipath_;
};

}  // namespace kvstash::backends
