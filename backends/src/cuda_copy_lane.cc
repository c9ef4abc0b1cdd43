// A lane's copy from start to end: deadlines, the path or paths that carry
// it, the done slot, and the wait for its end.
#include "cuda_copy_lane.h"

#include <chrono>

namespace kvstash::backends {

namespace {

// The chunks of a call not past their deadline now (the others are marked
// missed), with each one's place among the call's.
struct LiveChunks {
  std::vector<kernels::ChunkCopy> chunks;
  std::vector<uint32_t> slabs;
  std::vector<size_t> index;
};

LiveChunks LeaveOutMissed(const std::vector<kernels::ChunkCopy>& all_chunks,
                          const std::vector<uint32_t>& all_slabs, CopyDeadlines& deadlines) {
  LiveChunks live;
  const auto now = std::chrono::steady_clock::now();
  for (size_t i = 0; i < all_chunks.size(); ++i) {
    if (deadlines.Passed(i, now)) {
      deadlines.missed[i] = 1;
    } else {
      live.chunks.push_back(all_chunks[i]);
      live.slabs.push_back(all_slabs[i]);
      live.index.push_back(i);
    }
  }
  return live;
}

}  // namespace

Result<std::unique_ptr<CudaCopyLane>> CudaCopyLane::Create(const Options& options) {
  Result<std::unique_ptr<CudaLaneCore>> core = CudaLaneCore::Create(options);
  if (!core.ok()) return core.status();
  return std::unique_ptr<CudaCopyLane>(new CudaCopyLane(std::move(*core)));
}

Status CudaCopyLane::Copy(const CopyLayout& layout,
                          const std::vector<kernels::ChunkCopy>& all_chunks,
                          const std::vector<uint32_t>& all_slabs, CopyDeadlines& deadlines,
                          const CopySignal* signal) {
  deadlines.missed.assign(all_chunks.size(), 0);
  // Chunks past their deadline now are not copied at all.
  LiveChunks live;
  if (deadlines.any()) live = LeaveOutMissed(all_chunks, all_slabs, deadlines);
  const std::vector<kernels::ChunkCopy>& chunks = deadlines.any() ? live.chunks : all_chunks;
  const std::vector<uint32_t>& slabs = deadlines.any() ? live.slabs : all_slabs;
  const std::vector<size_t>& index = live.index;  // empty: every chunk is live
  if (chunks.empty()) return Status::Ok();
  const auto expired = [&](size_t begin, size_t end) {
    if (!deadlines.any()) return false;
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = begin; i < end; ++i) {
      if (deadlines.Passed(index[i], now)) return true;
    }
    return false;
  };
  size_t stopped_at = chunks.size();
  Result<const LayerAddresses*> addresses = core_->Begin(layout);
  if (!addresses.ok()) return addresses.status();
  // A gated store reaches the lane only once its gate is open (the transfer
  // worker checks it from the CPU): no stream here waits on an engine.
  Status copied =
      core_->options().mode == TransferMode::kDirect
          ? CopyDirect(layout, **addresses, chunks, signal)
          : CopyThroughStaging(layout, **addresses, chunks, slabs, signal, expired, &stopped_at);
  if (copied.ok() && signal != nullptr && signal->done_slot) {
    // After the last gather: the engine's blocks may be reused.
    copied = core_->SignalSlot(*signal, *signal->done_slot);
  }
  for (size_t i = stopped_at; i < chunks.size(); ++i)
    deadlines.missed[index.empty() ? i : index[i]] = 1;
  core_->Enqueued();
  // Whatever was enqueued finishes before the plan, the ring or a slot is
  // touched again, also after a failed launch.
  const uint64_t bytes = chunks.size() * layout.chunk_bytes;
  multipath_.Join();
  const Status drained = core_->Drain(bytes);
  multipath_.Release(drained.ok());
  if (!copied.ok() || !drained.ok()) return copied.ok() ? drained : copied;
  return core_->Finished(chunks.size(), bytes);
}

Status CudaCopyLane::CopyDirect(const CopyLayout& layout, const LayerAddresses& addresses,
                                const std::vector<kernels::ChunkCopy>& chunks,
                                const CopySignal* signal) {
  const std::vector<CopyStep> steps = CopySteps(layout.groups, signal);
  Result<std::vector<uint8_t*>> flats = core_->DeviceFlats(chunks);
  if (!flats.ok()) return flats.status();
  if (multipath_.Acquire(layout, chunks.size()) > 0 && multipath_.KeepRelaysReaching(layout) > 0)
    return multipath_.Direct(layout, addresses, steps, chunks, *flats, signal);
  return single_.Direct(addresses, steps, chunks, *flats, signal);
}

Status CudaCopyLane::CopyThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                                        const std::vector<kernels::ChunkCopy>& chunks,
                                        const std::vector<uint32_t>& slabs,
                                        const CopySignal* signal, const Expired& expired,
                                        size_t* stopped_at) {
  if (multipath_.Acquire(layout, chunks.size()) > 0)
    return multipath_.ThroughStaging(layout, addresses, chunks, slabs, signal, expired, stopped_at);
  return single_.ThroughStaging(layout, addresses, chunks, slabs, signal, expired, stopped_at);
}

}  // namespace kvstash::backends
