// What one GPU needs to carry one direction of its NVLink peers' copies
// (multi-path retrieves or stores); a GPU that carries both has one of
// these per direction, each with its own staging, streams and events, so
// that a peer's store and another peer's retrieve through it never share a
// region. dma mode: its own staging, a stream for copies between host and
// staging over its PCIe link (the host stream), a stream for copies between
// staging and the target's staging over NVLink (the link stream), and the
// events that chain them. direct mode: no staging; the gather or scatter
// kernels run on its link stream, reading or writing mapped L1 slots over
// its PCIe link and the target's engine blocks over NVLink (the engine's
// allocations are opened on this GPU too), from a plan and layer addresses
// of its own. All of it lives on this GPU.
//
// Owned by the CUDA backend, shared by the lanes of that direction of the
// other GPUs: one copy holds it at a time (TryAcquire / Release), and only
// the lane thread holding it touches its streams, staging and events, so
// those need no lock. A relay whose copies failed is not used again: the
// failure is logged and shown by `kvstash describe`.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>

#include "cuda_copy_plan.h"
#include "kvstash/backends/backend.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/streams.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"
#include "registration_cache.h"

namespace kvstash::backends {

class CudaRelayPath {
 public:
  static constexpr size_t kMaxRegions = 16;
  // Streams, events and `staging_bytes` of staging (0: none, direct mode)
  // on `device` for copies of `direction` (the current device is changed).
  static Result<std::unique_ptr<CudaRelayPath>> Create(int device, Direction direction,
                                                       uint64_t staging_bytes);

  int device() const { return device_; }
  Direction direction() const { return direction_; }
  uint8_t* staging() const { return staging_.data(); }
  uint64_t staging_bytes() const { return staging_.size(); }
  cudaStream_t host_stream() const { return host_stream_.get(); }
  cudaStream_t link_stream() const { return link_stream_.get(); }
  // Retrieve: region r's bytes have landed from the host (host stream) /
  // have been copied to the target (link stream): the next host copy into
  // r waits for `pulled`. Store: region r's bytes have landed in L1 (host
  // stream) / have come from the target (link stream): the next NVLink
  // copy into r waits for `landed`. Direct mode: pulled(0) ends a kernel.
  cudaEvent_t landed(size_t r) const { return landed_[r].get(); }
  cudaEvent_t pulled(size_t r) const { return pulled_[r].get(); }
  // Store: the relay's NVLink copies out of the target's staging region r
  // are done (link stream): the target gathers into r again after it.
  cudaEvent_t freed(size_t r) const { return freed_[r].get(); }
  // The ends of both streams, which the target's streams wait for.
  cudaEvent_t host_done() const { return host_done_.get(); }
  cudaEvent_t link_done() const { return link_done_.get(); }
  // Direct mode: the plan of the chunks it scatters, and the layer
  // addresses of each registration as this GPU reaches them.
  CopyPlan& plan() { return plan_; }
  RegistrationCache<LayerAddresses>& addresses() { return addresses_; }

  // Whether it is free and has not failed; then the caller holds it until
  // Release.
  bool TryAcquire();
  void Release();
  // Never used again, for this reason.
  void Fail(const Status& why);
  bool failed() const { return failed_.load(std::memory_order_acquire); }
  std::string failure() const;

  // Counters for describe: copies (of its direction) it relayed, bytes it
  // carried.
  void Count(uint64_t copies, uint64_t bytes) {
    copies_.fetch_add(copies, std::memory_order_relaxed);
    bytes_.fetch_add(bytes, std::memory_order_relaxed);
  }
  uint64_t copies_relayed() const { return copies_.load(std::memory_order_relaxed); }
  uint64_t bytes_carried() const { return bytes_.load(std::memory_order_relaxed); }

 private:
  CudaRelayPath(int device, Direction direction) : device_(device), direction_(direction) {}

  const int device_;
  const Direction direction_;
  cuda::DeviceBuffer staging_;
  cuda::Stream host_stream_;
  cuda::Stream link_stream_;
  cuda::Event landed_[kMaxRegions];
  cuda::Event pulled_[kMaxRegions];
  cuda::Event freed_[kMaxRegions];
  cuda::Event host_done_;
  cuda::Event link_done_;
  CopyPlan plan_;
  RegistrationCache<LayerAddresses> addresses_{64};
  std::atomic<bool> held_{false};
  std::atomic<bool> failed_{false};
  std::atomic<uint64_t> copies_{0};
  std::atomic<uint64_t> bytes_{0};
  mutable Mutex mutex_;
  std::string failure_ KVSTASH_GUARDED_BY(mutex_);
};

}  // namespace kvstash::backends
