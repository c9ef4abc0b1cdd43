// Multi-path copies of one copy lane: the relays it takes, how a dma copy is
// cut for them, direct mode's pieces (their scatter or gather kernels over
// NVLink), and giving the relays back. A dma retrieve's pieces:
// cuda_multipath_retrieve.cc; a dma store's: cuda_multipath_store.cc.
#include "cuda_multipath_copy.h"

#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <string>

#include "backends_logger.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

// A relay's staging regions start at this alignment, as copy engines like.
constexpr uint64_t kRelayRegionAlignment = 4096;

}  // namespace

size_t CudaMultipathCopy::Acquire(const CopyLayout& layout, size_t chunks) {
  held_.clear();
  if (relays_.paths.empty() || relays_.loads == nullptr || layout.chunk_bytes == 0) return 0;
  const CudaLaneCore::Options& options = lane_.options();
  uint64_t layers = 0;
  for (const GroupAddresses& g : layout.groups) layers += g.group.shape.num_layers;
  std::vector<RelayCandidate> candidates;
  for (CudaRelayPath* path : relays_.paths) {
    RelayCandidate c;
    c.device = path->device();
    c.linked = true;  // only NVLink peers with peer access are given
    // dma: pieces are cut to fit its staging twice (checked once cut).
    c.available =
        !path->failed() && (options.mode == TransferMode::kDirect || path->staging_bytes() > 0);
    c.queued_bytes = relays_.loads->Bytes(path->device(), options.direction);
    candidates.push_back(c);
  }
  // Chunks times layers: a piece holds one layer of one chunk at least.
  const size_t shares = size_t(std::min<uint64_t>(chunks * layers, 1u << 20));
  for (size_t i : ChooseRelays(relays_.policy, chunks * layout.chunk_bytes, shares, candidates)) {
    // Another lane may have taken it since: then one path fewer.
    if (relays_.paths[i]->TryAcquire()) held_.push_back({relays_.paths[i]});
  }
  return held_.size();
}

bool CudaMultipathCopy::RelayUsable(const HeldRelay& h) const {
  return !h.path->failed() &&
         RelayIdle(relays_.policy,
                   relays_.loads->Bytes(h.path->device(), lane_.options().direction));
}

void CudaMultipathCopy::UpdateUsable(Cut& cut) const {
  for (size_t p = 1; p < cut.usable.size(); ++p)
    cut.usable[p] = cut.usable[p] && RelayUsable(held_[p - 1]);
}

std::optional<CudaMultipathCopy::Cut> CudaMultipathCopy::CutCopy(const CopyLayout& layout,
                                                                 size_t chunks,
                                                                 const CopySignal* signal) {
  const uint64_t chunk_bytes = layout.chunk_bytes;
  const size_t slots = size_t(lane_.staging_bytes() / chunk_bytes);
  if (slots == 0) return std::nullopt;  // refused at registration; the one path says so
  Cut cut;
  cut.steps = CopySteps(layout.groups, signal);
  // Pieces of at most half of every relay's staging: each relay then holds
  // two, its host copy of one overlapping its NVLink copy of the other.
  uint64_t piece_bytes = std::max<uint64_t>(1, relays_.piece_bytes);
  for (const HeldRelay& h : held_)
    piece_bytes =
        std::min<uint64_t>(piece_bytes, std::max<uint64_t>(1, h.path->staging_bytes() / 2));
  // Two batches at least fit this GPU's staging, so that one is scattered
  // while the next lands.
  const size_t max_per_batch = std::min(chunks, std::max<size_t>(1, slots / 2));
  for (;;) {
    const size_t paths = 1 + held_.size();
    cut.per_batch = ChunksPerBatch(chunk_bytes, paths, piece_bytes, max_per_batch);
    cut.pieces =
        SplitCopy(layout.groups, cut.steps, chunk_bytes, chunks, cut.per_batch, paths, piece_bytes);
    uint64_t largest = 0;
    for (const CopyPiece& piece : cut.pieces) largest = std::max(largest, piece.bytes);
    // A piece larger than piece_bytes (one layer of a batch is) may not fit
    // a relay twice: that relay stays out, and the rest share the pieces.
    const size_t before = held_.size();
    for (size_t i = 0; i < held_.size();) {
      HeldRelay& h = held_[i];
      h.region_bytes =
          (largest + kRelayRegionAlignment - 1) / kRelayRegionAlignment * kRelayRegionAlignment;
      h.regions = largest == 0 ? 0
                               : std::min<size_t>(CudaRelayPath::kMaxRegions,
                                                  size_t(h.path->staging_bytes() / h.region_bytes));
      if (h.regions >= 2) {
        ++i;
        continue;
      }
      h.path->Release();
      held_.erase(held_.begin() + long(i));
    }
    if (held_.size() == before) break;
  }
  if (held_.empty()) return std::nullopt;
  const size_t paths = 1 + held_.size();
  cut.regions =
      std::min<size_t>(CudaLaneCore::kMaxRegions, std::max<size_t>(1, slots / cut.per_batch));
  cut.carried.assign(paths, 0);  // bytes each path took so far
  cut.usable.assign(paths, true);
  return cut;
}

Status CudaMultipathCopy::ThroughStaging(const CopyLayout& layout, const LayerAddresses& addresses,
                                         const std::vector<kernels::ChunkCopy>& chunks,
                                         const std::vector<uint32_t>& slabs,
                                         const CopySignal* signal, const Expired& expired,
                                         size_t* stopped_at) {
  std::optional<Cut> cut = CutCopy(layout, chunks.size(), signal);
  if (!cut)
    return single_.ThroughStaging(layout, addresses, chunks, slabs, signal, expired, stopped_at);
  // As on one path: chunk i keeps one slot for the whole request, in region
  // (i / per_batch) % regions; a batch's chunks are adjacent, so a piece's
  // rows are a chunk apart here. A batch that refills a region waits for
  // the scatters of the one before it there.
  const uint64_t chunk_bytes = layout.chunk_bytes;
  const std::vector<uint8_t*> flats =
      lane_.StagingSlots(chunks.size(), cut->per_batch, cut->regions, chunk_bytes);
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Upload(lane_.kernel_stream()));
  const StagedCopy request{chunks, slabs, flats, chunk_bytes};
  const std::vector<std::vector<PieceBatch>> batches =
      PieceBatches(cut->pieces, cut->steps.size(), chunks.size(), cut->per_batch, cut->regions);
  for (size_t s = 0; s < cut->steps.size(); ++s) {
    for (const PieceBatch& batch : batches[s]) {
      if (expired(batch.begin, batch.end)) {  // enqueue no batch past a deadline
        *stopped_at = s == 0 ? batch.begin : 0;
        return Status::Ok();
      }
      if (lane_.store()) {
        KVSTASH_RETURN_IF_ERROR(GatherStoreBatch(addresses, *cut, batch));
        KVSTASH_RETURN_IF_ERROR(SendStoreBatch(*cut, batch, request));
      } else {
        KVSTASH_RETURN_IF_ERROR(RetrieveBatchThroughPaths(addresses, *cut, batch, request));
      }
    }
    for (uint32_t slot : cut->steps[s].slots)
      KVSTASH_RETURN_IF_ERROR(lane_.SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

size_t CudaMultipathCopy::KeepRelaysReaching(const CopyLayout& layout) {
  // Relays on which the engine's memory is not open stay out.
  for (size_t h = 0; h < held_.size();) {
    Result<const LayerAddresses*> there = RelayAddressesOf(*held_[h].path, layout);
    if (there.ok()) {
      held_[h++].addresses = *there;
      continue;
    }
    Logger()->debug("GPU {} cannot help GPU {} with registration {:x}: {}", held_[h].path->device(),
                    lane_.options().device, layout.registration_id, there.status().ToString());
    held_[h].path->Release();
    held_.erase(held_.begin() + long(h));
  }
  return held_.size();
}

Result<const LayerAddresses*> CudaMultipathCopy::RelayAddressesOf(CudaRelayPath& path,
                                                                  const CopyLayout& layout) {
  if (const LayerAddresses* found = path.addresses().Find(layout.registration_id)) return found;
  if (layout.allocations == nullptr) return Status::Unavailable("no allocations given");
  // Each layer at the same offset of its allocation as that GPU maps it.
  std::vector<GroupAddresses> there = layout.groups;
  for (GroupAddresses& g : there) {
    for (uint8_t*& base : g.layer_bases) {
      uint8_t* moved = nullptr;
      for (const auto& a : *layout.allocations) {
        if (base >= a->base() && base < a->base() + a->size_bytes()) {
          uint8_t* on = a->base_on(path.device());
          if (on != nullptr) moved = on + (base - a->base());
          break;
        }
      }
      if (moved == nullptr) {
        return Status::Unavailable("a layer's allocation is not open on GPU " +
                                   std::to_string(path.device()));
      }
      base = moved;
    }
    g.group.layer_bases = g.layer_bases.data();
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
  Result<LayerAddresses> uploaded = LayerAddresses::Upload(there, path.link_stream());
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(lane_.options().device));
  if (!uploaded.ok()) return uploaded.status();
  return &path.addresses().Insert(layout.registration_id, std::move(*uploaded));
}

Status CudaMultipathCopy::Direct(const CopyLayout& layout, const LayerAddresses& addresses,
                                 const std::vector<CopyStep>& steps,
                                 const std::vector<kernels::ChunkCopy>& chunks,
                                 const std::vector<uint8_t*>& flats, const CopySignal* signal) {
  const size_t paths = 1 + held_.size();
  // No staging to pipeline through: one piece per path and step, the
  // paths' kernels running side by side.
  const std::vector<CopyPiece> pieces =
      SplitCopy(layout.groups, steps, layout.chunk_bytes, chunks.size(), chunks.size(), paths,
                std::numeric_limits<uint64_t>::max());
  // Every GPU's plan holds every chunk, so that any path can scatter any
  // piece (this GPU those of a relay that fails).
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(lane_.plan().Upload(lane_.kernel_stream()));
  std::vector<bool> usable(paths, true);
  KVSTASH_RETURN_IF_ERROR(PlanOnRelays(chunks, usable));
  std::vector<uint64_t> carried(paths, 0);
  size_t next = 0;
  for (size_t s = 0; s < steps.size(); ++s) {
    for (; next < pieces.size() && pieces[next].step == s; ++next) {
      const CopyPiece& piece = pieces[next];
      for (size_t p = 1; p < paths; ++p) usable[p] = usable[p] && RelayUsable(held_[p - 1]);
      const size_t p = LeastLoadedPath(carried, usable);
      if (p > 0) {
        HeldRelay& h = held_[p - 1];
        const Status launched = LaunchOnRelay(h, piece, next);
        if (launched.ok()) {
          carried[p] += piece.bytes;
          h.bytes += piece.bytes;
          continue;
        }
        // Abandon waits for what it launched; this GPU scatters the piece
        // (the same bytes again, where some were written) and the rest.
        Abandon(h, launched);
        usable[p] = false;
      }
      KVSTASH_RETURN_IF_ERROR(
          lane_.Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin, s));
      carried[0] += piece.bytes;
    }
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(lane_.SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaMultipathCopy::PlanOnRelays(const std::vector<kernels::ChunkCopy>& chunks,
                                       std::vector<bool>& usable) {
  const CudaLaneCore::Options& options = lane_.options();
  for (size_t p = 1; p < usable.size(); ++p) {
    HeldRelay& h = held_[p - 1];
    Status planned = cuda::CudaStatus(cudaSetDevice(h.path->device()), "cudaSetDevice");
    std::vector<uint8_t*> there(chunks.size());
    for (size_t i = 0; planned.ok() && i < chunks.size(); ++i) {
      there[i] = chunks[i].flat;
      if (options.host_pointers_on_device) continue;
      void* mapped = nullptr;
      planned = cuda::CudaStatus(cudaHostGetDevicePointer(&mapped, chunks[i].flat, 0),
                                 "cudaHostGetDevicePointer");
      there[i] = static_cast<uint8_t*>(mapped);
    }
    if (planned.ok()) planned = h.path->plan().Build(chunks, there);
    if (planned.ok()) planned = h.path->plan().Upload(h.path->link_stream());
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options.device));
    if (!planned.ok()) {
      Abandon(h, planned);
      usable[p] = false;
    }
  }
  return Status::Ok();
}

Status CudaMultipathCopy::LaunchOnRelay(HeldRelay& h, const CopyPiece& piece, size_t piece_index) {
  CudaRelayPath& path = *h.path;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
  const Status launched = [&]() -> Status {
    if (relays_.fault) KVSTASH_RETURN_IF_ERROR(relays_.fault(path.device(), piece_index));
    KVSTASH_RETURN_IF_ERROR(lane_.LaunchGroups(
        *h.addresses, piece.slices, path.plan().Slice(piece.begin, piece.end - piece.begin),
        path.link_stream()));
    return cuda::CudaStatus(cudaEventRecord(path.pulled(0), path.link_stream()),
                            "cudaEventRecord(pulled)");
  }();
  const Status back = cuda::CudaStatus(cudaSetDevice(lane_.options().device), "cudaSetDevice");
  if (!launched.ok()) return launched;
  if (!back.ok()) return back;
  // The step's slots (a store's done slot), written after this on the
  // kernel stream, wait for it.
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lane_.kernel_stream(), path.pulled(0), 0));
  return Status::Ok();
}

void CudaMultipathCopy::Abandon(HeldRelay& h, const Status& why) {
  // Nothing it enqueued may still be writing this GPU's staging, L1 slots
  // (or, in direct mode, the engine's blocks) when the own link takes its
  // pieces over.
  const int device = lane_.options().device;
  if (cudaSetDevice(h.path->device()) == cudaSuccess) {
    (void)cudaStreamSynchronize(h.path->host_stream());
    (void)cudaStreamSynchronize(h.path->link_stream());
  }
  (void)cudaGetLastError();
  (void)cudaSetDevice(device);
  h.path->Fail(why);
  Logger()->warn("GPU {} stops carrying {} for GPU {}: {}; they go over GPU {}'s own link now",
                 h.path->device(), lane_.store() ? "stores" : "retrieves", device, why.ToString(),
                 device);
}

void CudaMultipathCopy::Join() {
  for (HeldRelay& h : held_) {
    if (h.path->failed()) continue;  // abandoned: its streams were synchronised
    Status joined = cuda::CudaStatus(cudaSetDevice(h.path->device()), "cudaSetDevice");
    if (joined.ok()) {
      joined = cuda::CudaStatus(cudaEventRecord(h.path->host_done(), h.path->host_stream()),
                                "cudaEventRecord(host_done)");
    }
    if (joined.ok()) {
      joined = cuda::CudaStatus(cudaEventRecord(h.path->link_done(), h.path->link_stream()),
                                "cudaEventRecord(link_done)");
    }
    (void)cudaSetDevice(lane_.options().device);
    for (cudaEvent_t done : {h.path->host_done(), h.path->link_done()}) {
      if (joined.ok()) {
        joined = cuda::CudaStatus(cudaStreamWaitEvent(lane_.kernel_stream(), done, 0),
                                  "cudaStreamWaitEvent(relay)");
      }
    }
    if (!joined.ok()) Abandon(h, joined);
  }
}

void CudaMultipathCopy::Release(bool drained) {
  bool any = false;
  for (HeldRelay& h : held_) {
    if (!drained && !h.path->failed()) {
      // The wait that covers its streams failed: wait for them here, so
      // that the next holder finds them idle.
      if (cudaSetDevice(h.path->device()) == cudaSuccess) {
        (void)cudaStreamSynchronize(h.path->host_stream());
        (void)cudaStreamSynchronize(h.path->link_stream());
      }
      (void)cudaGetLastError();
      (void)cudaSetDevice(lane_.options().device);
    }
    any |= h.bytes > 0;
    h.path->Count(h.bytes > 0 ? 1 : 0, h.bytes);
    h.path->Release();
  }
  if (any) copies_.fetch_add(1, std::memory_order_relaxed);
  held_.clear();
}

}  // namespace kvstash::backends
