// A copy lane's copy over its own GPU's PCIe link alone: direct mode's
// kernels over the mapped L1 slots, or dma mode's pipeline through the
// staging ring (cuda_lane_core.h says how each runs). What every copy runs
// where no relay takes part (multi-path: cuda_multipath_copy.h).
//
// Used by its lane's thread only.
#pragma once

#include <cstdint>
#include <vector>

#include "cuda_copy_steps.h"
#include "cuda_lane_core.h"

namespace kvstash::backends {

class CudaSinglePathCopy {
 public:
  explicit CudaSinglePathCopy(CudaLaneCore& lane) : lane_(lane) {}

  // Direct mode: each step's kernels over every chunk (flats: their L1 slots
  // as the GPU addresses them), then its slots.
  Status Direct(const LayerAddresses& addresses, const std::vector<CopyStep>& steps,
                const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint8_t*>& flats,
                const CopySignal* signal);
  // dma mode: each step in sub-batches through regions of the ring, then
  // its slots. Enqueues no sub-batch past a deadline (expired); then
  // *stopped_at says from which chunk on nothing was copied.
  Status ThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                        const std::vector<kernels::ChunkCopy>& chunks,
                        const std::vector<uint32_t>& slabs, const CopySignal* signal,
                        const Expired& expired, size_t* stopped_at);

 private:
  // One sub-batch, chunks [begin, end) of one step, in region `region`
  // (after its previous sub-batch there where wait_free): a store's gather
  // then copy to L1, a retrieve's copy from L1 then scatter. `k` numbers it
  // across steps.
  Status SubBatch(const LayerAddresses& addresses, const CopyStep& step,
                  const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint32_t>& slabs,
                  const std::vector<uint8_t*>& flats, uint64_t chunk_bytes, size_t begin,
                  size_t end, size_t region, bool wait_free, size_t k);

  CudaLaneCore& lane_;
};

}  // namespace kvstash::backends
