// dma and direct copies of one lane over its own link.
#include "cuda_single_path_copy.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <string>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

// Bytes of one sub-batch of a staged copy (one chunk at least).
constexpr uint64_t kSubBatchBytes = 8 << 20;

}  // namespace

Status CudaSinglePathCopy::Direct(const LayerAddresses& addresses,
                                  const std::vector<CopyStep>& steps,
                                  const std::vector<kernels::ChunkCopy>& chunks,
                                  const std::vector<uint8_t*>& flats, const CopySignal* signal) {
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Upload(lane_.kernel_stream()));
  for (size_t s = 0; s < steps.size(); ++s) {
    KVSTASH_RETURN_IF_ERROR(lane_.Launch(addresses, steps[s].slices, 0, chunks.size(), s));
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(lane_.SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaSinglePathCopy::ThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                                          const std::vector<kernels::ChunkCopy>& chunks,
                                          const std::vector<uint32_t>& slabs,
                                          const CopySignal* signal, const Expired& expired,
                                          size_t* stopped_at) {
  const uint64_t chunk_bytes = layout.chunk_bytes;
  const uint64_t staging_bytes = lane_.staging_bytes();
  const uint64_t slots = chunk_bytes == 0 ? 0 : staging_bytes / chunk_bytes;
  if (slots == 0) {  // CheckRegistration refuses such layouts; kept as a guard
    return Status::TooLarge("a chunk of " + std::to_string(chunk_bytes) +
                            " bytes does not fit the staging ring of " +
                            std::to_string(staging_bytes) + " bytes");
  }
  // The ring is cut into regions of one sub-batch each, so that the kernel
  // of one sub-batch runs while the copies of others are under way. A
  // sub-batch is as small as keeps per-copy overheads negligible: the
  // kernel time nothing overlaps (that of the first or last sub-batch)
  // shrinks with it. Each chunk keeps one staging slot for the whole
  // request (one plan serves every step): chunk i sits in region
  // (i / per_region) % regions.
  const size_t per_region = size_t(std::clamp<uint64_t>(
      (kSubBatchBytes + chunk_bytes - 1) / chunk_bytes, 1, std::max<uint64_t>(1, slots / 2)));
  const size_t regions = std::min<size_t>(CudaLaneCore::kMaxRegions, size_t(slots) / per_region);
  const size_t batches = (chunks.size() + per_region - 1) / per_region;
  const std::vector<CopyStep> steps = CopySteps(layout.groups, signal);
  // Where every chunk has a slot of its own, steps never wait for a region
  // to free: they touch different bytes of it. Otherwise a sub-batch waits
  // for the kernel or copy of the one before it in its region.
  const bool reuse = batches > regions;
  const std::vector<uint8_t*> flats =
      lane_.StagingSlots(chunks.size(), per_region, regions, chunk_bytes);
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Upload(lane_.kernel_stream()));
  for (size_t s = 0; s < steps.size(); ++s) {
    const CopyStep& step = steps[s];
    bool any_layer = false;
    for (const auto& slice : step.slices) any_layer |= slice.second > 0;
    for (size_t b = 0, begin = 0; any_layer && begin < chunks.size(); ++b, begin += per_region) {
      const size_t k = s * batches + b;  // the sub-batch, across steps
      const size_t end = std::min(chunks.size(), begin + per_region);
      if (expired(begin, end)) {  // enqueue no sub-batch past a deadline
        // Chunks [begin, end) and later miss this step: they are missed.
        // Earlier chunks missing a later step are missed too.
        *stopped_at = s == 0 ? begin : 0;
        return Status::Ok();
      }
      KVSTASH_RETURN_IF_ERROR(SubBatch(addresses, step, chunks, slabs, flats, chunk_bytes, begin,
                                       end, b % regions, reuse && k >= regions, k));
    }
    for (uint32_t slot : step.slots) KVSTASH_RETURN_IF_ERROR(lane_.SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaSinglePathCopy::SubBatch(const LayerAddresses& addresses, const CopyStep& step,
                                    const std::vector<kernels::ChunkCopy>& chunks,
                                    const std::vector<uint32_t>& slabs,
                                    const std::vector<uint8_t*>& flats, uint64_t chunk_bytes,
                                    size_t begin, size_t end, size_t region, bool wait_free,
                                    size_t k) {
  cudaStream_t kernels = lane_.kernel_stream();
  cudaStream_t copies = lane_.copy_stream();
  cudaEvent_t ready = lane_.region_ready(region);
  cudaEvent_t free = lane_.region_free(region);
  if (lane_.store()) {
    // gather -> ready -> D2H copy -> free (the gather of b + regions waits for it)
    if (wait_free) KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, free, 0));
    KVSTASH_RETURN_IF_ERROR(lane_.Launch(addresses, step.slices, begin, end - begin, k));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, kernels));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, ready, 0));
    KVSTASH_RETURN_IF_ERROR(
        lane_.CopySlots(chunks, slabs, flats, begin, end, chunk_bytes, k, step.windows));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(free, copies));
    return Status::Ok();
  }
  // H2D copy -> ready -> scatter -> free (the copy of b + regions waits for it)
  if (wait_free) KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, free, 0));
  KVSTASH_RETURN_IF_ERROR(
      lane_.CopySlots(chunks, slabs, flats, begin, end, chunk_bytes, k, step.windows));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(ready, copies));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, ready, 0));
  KVSTASH_RETURN_IF_ERROR(lane_.Launch(addresses, step.slices, begin, end - begin, k));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(free, kernels));
  return Status::Ok();
}

}  // namespace kvstash::backends
