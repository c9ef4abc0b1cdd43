// Multi-path copies of one copy lane: the relays it takes, the pieces of a
// retrieve it sends through them (dma: their links, staging and an NVLink
// copy; direct: their scatter or gather kernels over NVLink), and giving
// them back. A dma store's pieces: cuda_copy_lane_multipath_store.cc.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <limits>
#include <string>

#include "backends_logger.h"
#include "cuda_copy_lane.h"
#include "cuda_relay_path.h"
#include "kvstash/backends/link_loads.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

namespace {

// A relay's staging regions start at this alignment, as copy engines like.
constexpr uint64_t kRelayRegionAlignment = 4096;

}  // namespace

size_t CudaCopyLane::AcquireRelays(const CopyLayout& layout, size_t chunks) {
  held_.clear();
  if (relays_.paths.empty() || relays_.loads == nullptr || layout.chunk_bytes == 0) return 0;
  uint64_t layers = 0;
  for (const GroupAddresses& g : layout.groups) layers += g.group.shape.num_layers;
  std::vector<RelayCandidate> candidates;
  for (CudaRelayPath* path : relays_.paths) {
    RelayCandidate c;
    c.device = path->device();
    c.linked = true;  // only NVLink peers with peer access are given
    // dma: pieces are cut to fit its staging twice (checked once cut).
    c.available =
        !path->failed() && (options_.mode == TransferMode::kDirect || path->staging_bytes() > 0);
    c.queued_bytes = relays_.loads->Bytes(path->device(), options_.direction);
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

bool CudaCopyLane::RelayUsable(const HeldRelay& h) const {
  return !h.path->failed() &&
         RelayIdle(relays_.policy, relays_.loads->Bytes(h.path->device(), options_.direction));
}

Status CudaCopyLane::CopyThroughStagingMultipath(const CopyLayout& layout,
                                                 const LayerAddresses& addresses,
                                                 const std::vector<kernels::ChunkCopy>& chunks,
                                                 const std::vector<uint32_t>& slabs,
                                                 const CopySignal* signal,
                                                 const std::function<bool(size_t, size_t)>& expired,
                                                 size_t* stopped_at) {
  const uint64_t chunk_bytes = layout.chunk_bytes;
  const size_t slots = size_t(staging_.size() / chunk_bytes);
  if (slots == 0)  // refused at registration; that one says so
    return CopyThroughStaging(layout, addresses, chunks, slabs, signal, expired, stopped_at);
  const std::vector<CopyStep> steps = CopySteps(layout.groups, signal);
  // Pieces of at most half of every relay's staging: each relay then holds
  // two, its host copy of one overlapping its NVLink copy of the other.
  uint64_t piece_bytes = std::max<uint64_t>(1, relays_.piece_bytes);
  for (const HeldRelay& h : held_)
    piece_bytes =
        std::min<uint64_t>(piece_bytes, std::max<uint64_t>(1, h.path->staging_bytes() / 2));
  // Two batches at least fit this GPU's staging, so that one is scattered
  // while the next lands.
  const size_t max_per_batch = std::min(chunks.size(), std::max<size_t>(1, slots / 2));
  size_t per_batch = 1;
  std::vector<CopyPiece> pieces;
  for (;;) {
    const size_t paths = 1 + held_.size();
    per_batch = ChunksPerBatch(chunk_bytes, paths, piece_bytes, max_per_batch);
    pieces =
        SplitCopy(layout.groups, steps, chunk_bytes, chunks.size(), per_batch, paths, piece_bytes);
    uint64_t largest = 0;
    for (const CopyPiece& piece : pieces) largest = std::max(largest, piece.bytes);
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
  if (held_.empty())
    return CopyThroughStaging(layout, addresses, chunks, slabs, signal, expired, stopped_at);

  const size_t paths = 1 + held_.size();
  const size_t regions = std::min<size_t>(kMaxRegions, std::max<size_t>(1, slots / per_batch));
  // As in CopyThroughStaging: chunk i keeps one slot for the whole request,
  // in region (i / per_batch) % regions; a batch's chunks are adjacent, so
  // a piece's rows are a chunk apart here. A batch that refills a region
  // waits for the scatters of the one before it there.
  cudaStream_t kernels = kernel_stream_.get();
  cudaStream_t copies = copy_stream_.get();
  const std::vector<uint8_t*> flats = StagingSlots(chunks.size(), per_batch, regions, chunk_bytes);
  KVSTASH_RETURN_IF_ERROR(plan_.Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(plan_.Upload(kernels));
  const StagedCopy request{chunks, slabs, flats, chunk_bytes};
  if (options_.direction == Direction::kStore) {
    return StoreThroughStagingMultipath(addresses, steps, pieces, per_batch, regions, request,
                                        signal, expired, stopped_at);
  }
  std::vector<uint64_t> carried(paths, 0);  // bytes each path took so far
  std::vector<bool> usable(paths, true);
  const std::vector<std::vector<PieceBatch>> batches =
      PieceBatches(pieces, steps.size(), chunks.size(), per_batch, regions);
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const PieceBatch& batch : batches[s]) {
      if (expired(batch.begin, batch.end)) {  // enqueue no batch past a deadline
        *stopped_at = s == 0 ? batch.begin : 0;
        return Status::Ok();
      }
      const size_t first = batch.first;
      const size_t count = batch.count;
      const size_t reg = batch.region;
      const bool wait_free = batch.refill;
      // The step's last batch: its slots (or the end of the request) wait
      // for its NVLink copies, which nothing else hides.
      const bool in_hops = batch.last;
      // Every piece of the batch gets its path first. A relay whose own
      // engine started loading gets no further piece: its own retrieves
      // queue behind no more of ours.
      for (size_t p = 1; p < paths; ++p) usable[p] = usable[p] && RelayUsable(held_[p - 1]);
      std::vector<size_t> path_of(count);
      for (size_t k = 0; k < count; ++k) {
        path_of[k] = LeastLoadedPath(carried, usable);
        carried[path_of[k]] += pieces[first + k].bytes;
      }
      std::vector<std::vector<RelayCopy>> relay_copies(count);
      std::vector<size_t> relay_region(count, 0);
      std::vector<bool> started(count, false);
      // A relay that failed on piece `from`: whatever it enqueued has
      // finished (Abandon waits for its streams), and its pieces of the
      // batch from that one on go over this link from the start.
      const auto give_up = [&](size_t p, size_t from, const Status& why) {
        Abandon(held_[p - 1], why);
        usable[p] = false;
        for (size_t k = from; k < count; ++k) {
          if (path_of[k] != p) continue;
          path_of[k] = 0;
          started[k] = false;
          carried[p] -= pieces[first + k].bytes;
          carried[0] += pieces[first + k].bytes;
        }
      };
      bool copies_waited = false;
      // H2D copy into this GPU's staging (once the batch's region is free).
      const auto copy_here = [&](size_t k) -> Status {
        const CopyPiece& piece = pieces[first + k];
        if (wait_free && !copies_waited) {
          KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(copies, region_free_[reg].get(), 0));
          copies_waited = true;
        }
        KVSTASH_RETURN_IF_ERROR(CopySlots(chunks, slabs, flats, piece.begin, piece.end, chunk_bytes,
                                          first + k, piece.windows));
        // A wait takes the event's latest record, after every earlier
        // copy of the stream: one event serves each piece.
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(region_ready_[reg].get(), copies));
        started[k] = true;
        return Status::Ok();
      };
      // Each path's first piece starts first: a relay's first host copy is
      // then not enqueued behind the other relays' NVLink copies and hops
      // (every call costs microseconds of this thread).
      std::vector<bool> path_began(paths, false);
      for (size_t k = 0; k < count; ++k) {
        const size_t p = path_of[k];
        if (path_began[p]) continue;
        path_began[p] = true;
        if (p == 0) {
          KVSTASH_RETURN_IF_ERROR(copy_here(k));
          continue;
        }
        relay_copies[k] = RelayCopies(pieces[first + k], chunk_bytes, in_hops, relays_.hop_bytes);
        const Status began = StartOnRelay(held_[p - 1], pieces[first + k], relay_copies[k], request,
                                          &relay_region[k]);
        if (!began.ok()) {
          give_up(p, k, began);
          continue;
        }
        started[k] = true;
      }
      for (size_t k = 0; k < count; ++k) {
        const CopyPiece& piece = pieces[first + k];
        const size_t p = path_of[k];
        if (p > 0) {
          HeldRelay& h = held_[p - 1];
          if (relay_copies[k].empty())
            relay_copies[k] = RelayCopies(piece, chunk_bytes, in_hops, relays_.hop_bytes);
          Status through = started[k]
                               ? Status::Ok()
                               : StartOnRelay(h, piece, relay_copies[k], request, &relay_region[k]);
          if (through.ok()) {
            through = FinishOnRelay(h, piece, relay_copies[k], request, wait_free, reg,
                                    relay_region[k], first + k);
          }
          if (through.ok()) {
            KVSTASH_RETURN_IF_ERROR(
                Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin, first + k));
            continue;
          }
          give_up(p, k, through);
        }
        // H2D copy -> ready -> scatter.
        if (!started[k]) KVSTASH_RETURN_IF_ERROR(copy_here(k));
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernels, region_ready_[reg].get(), 0));
        KVSTASH_RETURN_IF_ERROR(
            Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin, first + k));
      }
      // Every piece of the batch scattered: a later batch may refill it.
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(region_free_[reg].get(), kernels));
    }
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaCopyLane::StartOnRelay(HeldRelay& h, const CopyPiece& piece,
                                  const std::vector<RelayCopy>& copies, const StagedCopy& request,
                                  size_t* relay_region) {
  CudaRelayPath& path = *h.path;
  if (h.regions == 0 || piece.bytes > h.region_bytes || copies.empty())
    return Status::Internal("no room for the piece in the relay's staging");
  const size_t r = h.used % h.regions;
  *relay_region = r;
  const Status started = [&]() -> Status {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
    // Region r is refilled only once its last bytes went over NVLink.
    if (h.used >= h.regions)
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(path.host_stream(), path.pulled(r), 0));
    ++h.used;
    KVSTASH_RETURN_IF_ERROR(CopyOnRelayLink(h, r, piece, copies[0], request));
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(path.landed(r), path.host_stream()));
    return Status::Ok();
  }();
  // Back on this lane's GPU whatever happened there: its launches need it.
  const Status back = cuda::CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice");
  return started.ok() ? back : started;
}

Status CudaCopyLane::FinishOnRelay(HeldRelay& h, const CopyPiece& piece,
                                   const std::vector<RelayCopy>& copies, const StagedCopy& request,
                                   bool wait_free, size_t region, size_t relay_region,
                                   size_t piece_index) {
  CudaRelayPath& path = *h.path;
  const size_t r = relay_region;
  const Status sent = [&]() -> Status {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
    if (relays_.fault) KVSTASH_RETURN_IF_ERROR(relays_.fault(path.device(), piece_index));
    cudaStream_t link = path.link_stream();
    // This GPU's region is written only once its previous batch was
    // scattered.
    if (wait_free)
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, region_free_[region].get(), 0));
    const size_t rows = piece.end - piece.begin;
    uint8_t* const staged = path.staging() + r * h.region_bytes;
    uint8_t* const target = request.flats[piece.begin];
    for (size_t k = 0; k < copies.size(); ++k) {
      const RelayCopy& c = copies[k];
      if (k > 0) {  // the first one went in StartOnRelay
        KVSTASH_RETURN_IF_ERROR(CopyOnRelayLink(h, r, piece, c, request));
        // A wait takes the event's latest record: one event serves every copy.
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(path.landed(r), path.host_stream()));
      }
      // Over NVLink once landed.
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, path.landed(r), 0));
      if (rows == 1) {
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(
            target + c.lo, options_.device, staged + c.packed, path.device(), c.width, link));
        continue;
      }
      // Rows `width` apart there, a chunk apart in this GPU's staging.
      cudaMemcpy3DPeerParms copy{};
      copy.srcPtr = cudaPitchedPtr{staged + c.packed, c.width, c.width, rows};
      copy.srcDevice = path.device();
      copy.dstPtr = cudaPitchedPtr{target + c.lo, request.chunk_bytes, c.width, rows};
      copy.dstDevice = options_.device;
      copy.extent = cudaExtent{c.width, rows, 1};
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy3DPeerAsync(&copy, link));
    }
    return cuda::CudaStatus(cudaEventRecord(path.pulled(r), link), "cudaEventRecord(pulled)");
  }();
  const Status back = cuda::CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice");
  if (!sent.ok()) return sent;
  if (!back.ok()) return back;
  // The piece's scatter, next on the kernel stream, waits for it.
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernel_stream_.get(), path.pulled(r), 0));
  h.bytes += piece.bytes;
  return Status::Ok();
}

Status CudaCopyLane::CopyOnRelayLink(HeldRelay& h, size_t r, const CopyPiece& piece,
                                     const RelayCopy& c, const StagedCopy& request) {
  const bool store = options_.direction == Direction::kStore;
  uint8_t* const rows = h.path->staging() + r * h.region_bytes + c.packed;
  cudaStream_t host = h.path->host_stream();
  for (size_t first = piece.begin; first < piece.end;) {
    size_t last = first + 1;  // the run is [first, last)
    while (last < piece.end &&
           request.chunks[last].flat == request.chunks[last - 1].flat + request.chunk_bytes &&
           request.slabs[last] == request.slabs[first]) {
      ++last;
    }
    uint8_t* const row = rows + (first - piece.begin) * c.width;
    uint8_t* const slot = request.chunks[first].flat + c.lo;
    if (last - first == 1) {
      KVSTASH_CUDA_RETURN_IF_ERROR(
          store ? cudaMemcpyAsync(slot, row, c.width, cudaMemcpyDeviceToHost, host)
                : cudaMemcpyAsync(row, slot, c.width, cudaMemcpyHostToDevice, host));
    } else {  // rows `width` apart in the relay's staging, a chunk apart in L1
      KVSTASH_CUDA_RETURN_IF_ERROR(
          store ? cudaMemcpy2DAsync(slot, request.chunk_bytes, row, c.width, c.width, last - first,
                                    cudaMemcpyDeviceToHost, host)
                : cudaMemcpy2DAsync(row, c.width, slot, request.chunk_bytes, c.width, last - first,
                                    cudaMemcpyHostToDevice, host));
    }
    first = last;
  }
  return Status::Ok();
}

Result<const LayerAddresses*> CudaCopyLane::RelayAddressesOf(CudaRelayPath& path,
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
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
  if (!uploaded.ok()) return uploaded.status();
  return &path.addresses().Insert(layout.registration_id, std::move(*uploaded));
}

Status CudaCopyLane::CopyDirectMultipath(const CopyLayout& layout, const LayerAddresses& addresses,
                                         const std::vector<CopyStep>& steps,
                                         const std::vector<kernels::ChunkCopy>& chunks,
                                         const std::vector<uint8_t*>& flats,
                                         const CopySignal* signal) {
  const size_t paths = 1 + held_.size();
  // No staging to pipeline through: one piece per path and step, the
  // paths' kernels running side by side.
  const std::vector<CopyPiece> pieces =
      SplitCopy(layout.groups, steps, layout.chunk_bytes, chunks.size(), chunks.size(), paths,
                std::numeric_limits<uint64_t>::max());
  // Every GPU's plan holds every chunk, so that any path can scatter any
  // piece (this GPU those of a relay that fails).
  KVSTASH_RETURN_IF_ERROR(plan_.Build(chunks, flats));
  KVSTASH_RETURN_IF_ERROR(plan_.Upload(kernel_stream_.get()));
  std::vector<bool> usable(paths, true);
  for (size_t p = 1; p < paths; ++p) {
    HeldRelay& h = held_[p - 1];
    Status planned = cuda::CudaStatus(cudaSetDevice(h.path->device()), "cudaSetDevice");
    std::vector<uint8_t*> there(chunks.size());
    for (size_t i = 0; planned.ok() && i < chunks.size(); ++i) {
      there[i] = chunks[i].flat;
      if (options_.host_pointers_on_device) continue;
      void* mapped = nullptr;
      planned = cuda::CudaStatus(cudaHostGetDevicePointer(&mapped, chunks[i].flat, 0),
                                 "cudaHostGetDevicePointer");
      there[i] = static_cast<uint8_t*>(mapped);
    }
    if (planned.ok()) planned = h.path->plan().Build(chunks, there);
    if (planned.ok()) planned = h.path->plan().Upload(h.path->link_stream());
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(options_.device));
    if (!planned.ok()) {
      Abandon(h, planned);
      usable[p] = false;
    }
  }
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
          Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin, s));
      carried[0] += piece.bytes;
    }
    for (uint32_t slot : steps[s].slots) KVSTASH_RETURN_IF_ERROR(SignalSlot(*signal, slot));
  }
  return Status::Ok();
}

Status CudaCopyLane::LaunchOnRelay(HeldRelay& h, const CopyPiece& piece, size_t piece_index) {
  CudaRelayPath& path = *h.path;
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
  const Status launched = [&]() -> Status {
    if (relays_.fault) KVSTASH_RETURN_IF_ERROR(relays_.fault(path.device(), piece_index));
    KVSTASH_RETURN_IF_ERROR(LaunchGroups(*h.addresses, piece.slices,
                                         path.plan().Slice(piece.begin, piece.end - piece.begin),
                                         path.link_stream()));
    return cuda::CudaStatus(cudaEventRecord(path.pulled(0), path.link_stream()),
                            "cudaEventRecord(pulled)");
  }();
  const Status back = cuda::CudaStatus(cudaSetDevice(options_.device), "cudaSetDevice");
  if (!launched.ok()) return launched;
  if (!back.ok()) return back;
  // The step's slots (a store's done slot), written after this on the
  // kernel stream, wait for it.
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(kernel_stream_.get(), path.pulled(0), 0));
  return Status::Ok();
}

void CudaCopyLane::Abandon(HeldRelay& h, const Status& why) {
  // Nothing it enqueued may still be writing this GPU's staging, L1 slots
  // (or, in direct mode, the engine's blocks) when the own link takes its
  // pieces over.
  if (cudaSetDevice(h.path->device()) == cudaSuccess) {
    (void)cudaStreamSynchronize(h.path->host_stream());
    (void)cudaStreamSynchronize(h.path->link_stream());
  }
  (void)cudaGetLastError();
  (void)cudaSetDevice(options_.device);
  h.path->Fail(why);
  Logger()->warn("GPU {} stops carrying {} for GPU {}: {}; they go over GPU {}'s own link now",
                 h.path->device(), options_.direction == Direction::kStore ? "stores" : "retrieves",
                 options_.device, why.ToString(), options_.device);
}

void CudaCopyLane::JoinRelays() {
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
    (void)cudaSetDevice(options_.device);
    for (cudaEvent_t done : {h.path->host_done(), h.path->link_done()}) {
      if (joined.ok()) {
        joined = cuda::CudaStatus(cudaStreamWaitEvent(kernel_stream_.get(), done, 0),
                                  "cudaStreamWaitEvent(relay)");
      }
    }
    if (!joined.ok()) Abandon(h, joined);
  }
}

void CudaCopyLane::ReleaseRelays(bool drained) {
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
      (void)cudaSetDevice(options_.device);
    }
    any |= h.bytes > 0;
    h.path->Count(h.bytes > 0 ? 1 : 0, h.bytes);
    h.path->Release();
  }
  if (any) multipath_copies_.fetch_add(1, std::memory_order_relaxed);
  held_.clear();
}

}  // namespace kvstash::backends
