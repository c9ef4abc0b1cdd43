// Multi-path dma retrieves of one copy lane: batch by batch, each piece
// through its path into this GPU's staging (this GPU's own link: a copy from
// L1; a relay: a copy from L1 into its staging, then over NVLink), then
// scattered on this GPU's kernel stream once it is there.
#include <cuda_runtime_api.h>

#include "cuda_multipath_copy.h"
#include "kvstash/cuda/cuda_status.h"

namespace kvstash::backends {

Status CudaMultipathCopy::RetrieveBatchThroughPaths(const LayerAddresses& addresses, Cut& cut,
                                                    const PieceBatch& batch,
                                                    const StagedCopy& request) {
  const size_t count = batch.count;
  // Every piece of the batch gets its path first. A relay whose own
  // engine started loading gets no further piece: its own retrieves
  // queue behind no more of ours.
  UpdateUsable(cut);
  RetrieveBatch rb{batch, std::vector<size_t>(count), std::vector<std::vector<RelayCopy>>(count),
                   std::vector<size_t>(count, 0), std::vector<bool>(count, false)};
  for (size_t k = 0; k < count; ++k) {
    rb.path_of[k] = LeastLoadedPath(cut.carried, cut.usable);
    cut.carried[rb.path_of[k]] += cut.pieces[batch.first + k].bytes;
  }
  KVSTASH_RETURN_IF_ERROR(StartFirstPieces(cut, rb, request));
  for (size_t k = 0; k < count; ++k)
    KVSTASH_RETURN_IF_ERROR(FinishPiece(addresses, cut, rb, k, request));
  // Every piece of the batch scattered: a later batch may refill it.
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaEventRecord(lane_.region_free(batch.region), lane_.kernel_stream()));
  return Status::Ok();
}

void CudaMultipathCopy::GiveUpInBatch(Cut& cut, RetrieveBatch& rb, size_t p, size_t from,
                                      const Status& why) {
  Abandon(held_[p - 1], why);
  cut.usable[p] = false;
  for (size_t k = from; k < rb.batch.count; ++k) {
    if (rb.path_of[k] != p) continue;
    rb.path_of[k] = 0;
    rb.started[k] = false;
    cut.carried[p] -= cut.pieces[rb.batch.first + k].bytes;
    cut.carried[0] += cut.pieces[rb.batch.first + k].bytes;
  }
}

Status CudaMultipathCopy::CopyHere(Cut& cut, RetrieveBatch& rb, size_t k,
                                   const StagedCopy& request) {
  const CopyPiece& piece = cut.pieces[rb.batch.first + k];
  cudaStream_t copies = lane_.copy_stream();
  if (rb.batch.refill && !rb.copies_waited) {
    KVSTASH_CUDA_RETURN_IF_ERROR(
        cudaStreamWaitEvent(copies, lane_.region_free(rb.batch.region), 0));
    rb.copies_waited = true;
  }
  KVSTASH_RETURN_IF_ERROR(lane_.CopySlots(request.chunks, request.slabs, request.flats, piece.begin,
                                          piece.end, request.chunk_bytes, rb.batch.first + k,
                                          piece.windows));
  // A wait takes the event's latest record, after every earlier copy of
  // the stream: one event serves each piece.
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaEventRecord(lane_.region_ready(rb.batch.region), copies));
  rb.started[k] = true;
  return Status::Ok();
}

Status CudaMultipathCopy::StartFirstPieces(Cut& cut, RetrieveBatch& rb, const StagedCopy& request) {
  // The step's last batch: its slots (or the end of the request) wait for
  // its NVLink copies, which nothing else hides.
  const bool in_hops = rb.batch.last;
  std::vector<bool> path_began(cut.usable.size(), false);
  for (size_t k = 0; k < rb.batch.count; ++k) {
    const size_t p = rb.path_of[k];
    if (path_began[p]) continue;
    path_began[p] = true;
    if (p == 0) {
      KVSTASH_RETURN_IF_ERROR(CopyHere(cut, rb, k, request));
      continue;
    }
    const CopyPiece& piece = cut.pieces[rb.batch.first + k];
    rb.relay_copies[k] = RelayCopies(piece, request.chunk_bytes, in_hops, relays_.hop_bytes);
    const Status began =
        StartOnRelay(held_[p - 1], piece, rb.relay_copies[k], request, &rb.relay_region[k]);
    if (!began.ok()) {
      GiveUpInBatch(cut, rb, p, k, began);
      continue;
    }
    rb.started[k] = true;
  }
  return Status::Ok();
}

Status CudaMultipathCopy::FinishPiece(const LayerAddresses& addresses, Cut& cut, RetrieveBatch& rb,
                                      size_t k, const StagedCopy& request) {
  const PieceBatch& batch = rb.batch;
  const CopyPiece& piece = cut.pieces[batch.first + k];
  const size_t p = rb.path_of[k];
  if (p > 0) {
    HeldRelay& h = held_[p - 1];
    if (rb.relay_copies[k].empty())
      rb.relay_copies[k] = RelayCopies(piece, request.chunk_bytes, batch.last, relays_.hop_bytes);
    Status through = rb.started[k]
                         ? Status::Ok()
                         : StartOnRelay(h, piece, rb.relay_copies[k], request, &rb.relay_region[k]);
    if (through.ok()) {
      through = FinishOnRelay(h, piece, rb.relay_copies[k], request, batch.refill, batch.region,
                              rb.relay_region[k], batch.first + k);
    }
    if (through.ok()) {
      return lane_.Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin,
                          batch.first + k);
    }
    GiveUpInBatch(cut, rb, p, k, through);
  }
  // H2D copy -> ready -> scatter.
  if (!rb.started[k]) KVSTASH_RETURN_IF_ERROR(CopyHere(cut, rb, k, request));
  KVSTASH_CUDA_RETURN_IF_ERROR(
      cudaStreamWaitEvent(lane_.kernel_stream(), lane_.region_ready(batch.region), 0));
  return lane_.Launch(addresses, piece.slices, piece.begin, piece.end - piece.begin,
                      batch.first + k);
}

Status CudaMultipathCopy::StartOnRelay(HeldRelay& h, const CopyPiece& piece,
                                       const std::vector<RelayCopy>& copies,
                                       const StagedCopy& request, size_t* relay_region) {
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
  const Status back = cuda::CudaStatus(cudaSetDevice(lane_.options().device), "cudaSetDevice");
  return started.ok() ? back : started;
}

Status CudaMultipathCopy::FinishOnRelay(HeldRelay& h, const CopyPiece& piece,
                                        const std::vector<RelayCopy>& copies,
                                        const StagedCopy& request, bool wait_free, size_t region,
                                        size_t relay_region, size_t piece_index) {
  CudaRelayPath& path = *h.path;
  const int device = lane_.options().device;
  const size_t r = relay_region;
  const Status sent = [&]() -> Status {
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaSetDevice(path.device()));
    if (relays_.fault) KVSTASH_RETURN_IF_ERROR(relays_.fault(path.device(), piece_index));
    cudaStream_t link = path.link_stream();
    // This GPU's region is written only once its previous batch was
    // scattered.
    if (wait_free)
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(link, lane_.region_free(region), 0));
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
        KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyPeerAsync(target + c.lo, device, staged + c.packed,
                                                         path.device(), c.width, link));
        continue;
      }
      // Rows `width` apart there, a chunk apart in this GPU's staging.
      cudaMemcpy3DPeerParms copy{};
      copy.srcPtr = cudaPitchedPtr{staged + c.packed, c.width, c.width, rows};
      copy.srcDevice = path.device();
      copy.dstPtr = cudaPitchedPtr{target + c.lo, request.chunk_bytes, c.width, rows};
      copy.dstDevice = device;
      copy.extent = cudaExtent{c.width, rows, 1};
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpy3DPeerAsync(&copy, link));
    }
    return cuda::CudaStatus(cudaEventRecord(path.pulled(r), link), "cudaEventRecord(pulled)");
  }();
  const Status back = cuda::CudaStatus(cudaSetDevice(device), "cudaSetDevice");
  if (!sent.ok()) return sent;
  if (!back.ok()) return back;
  // The piece's scatter, next on the kernel stream, waits for it.
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamWaitEvent(lane_.kernel_stream(), path.pulled(r), 0));
  h.bytes += piece.bytes;
  return Status::Ok();
}

Status CudaMultipathCopy::CopyOnRelayLink(HeldRelay& h, size_t r, const CopyPiece& piece,
                                          const RelayCopy& c, const StagedCopy& request) {
  const bool store = lane_.store();
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

}  // namespace kvstash::backends
