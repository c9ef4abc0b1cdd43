// A backend is leveldb's Env for engine memory: how the daemon opens memory an
// engine shared, prepares L1 slabs, and copies chunks between the two. The
// host backend (POSIX shared memory, CPU copies) and the CUDA backend (IPC
// handles, kernels) run under the very same server, pool and index code.
#pragma once

#include <array>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "kvstash/backends/mapped_board.h"
#include "kvstash/backends/peer_credentials.h"
#include "kvstash/backends/slab_hooks.h"
#include "kvstash/kernels/chunk_copy.h"
#include "kvstash/status.h"

namespace kvstash::backends {

class LinkLoads;

// One allocation an engine shared, as described on the wire.
struct AllocationSpec {
  enum class Kind { kHostShm, kCudaIpc, kPeerFd };
  Kind kind = Kind::kHostShm;
  std::string shm_name;             // kHostShm
  int peer_fd = -1;                 // kPeerFd: a descriptor of the opener's process
  std::vector<uint8_t> ipc_handle;  // kCudaIpc: cudaIpcMemHandle_t bytes
  std::array<uint8_t, 16> gpu_uuid{};
  uint64_t size_bytes = 0;
  // The peer that asks for it: a backend opens nothing on a peer's behalf
  // that the peer could not open itself (docs/protocol.md "Trust").
  std::optional<PeerCredentials> opener;
  // Names the allocation, so that each one is opened once.
  std::string identity() const;
};

// Memory an engine shared, opened in the daemon. Closed by its destructor
// when the last registration using it goes.
class MappedAllocation {
 public:
  virtual ~MappedAllocation() = default;
  virtual uint8_t* base() const = 0;  // address the copy engine uses
  virtual uint64_t size_bytes() const = 0;
  virtual int device() const = 0;  // transfer worker index (0 for host)
  // The same memory as another device's kernels address it (multi-path
  // retrieves in direct mode open it there too); null where it is not open
  // on that device.
  virtual uint8_t* base_on(int device) const { return device == this->device() ? base() : nullptr; }
};

enum class Direction { kStore, kRetrieve };

// When one Copy call's chunks are cut off, and which chunks it did not copy
// because of it: a chunk's deadline passed, or the daemon is stopping. A
// backend checks before each copy unit of a chunk (host: each (layer,
// chunk) task; CUDA: each sub-batch it enqueues) and starts no unit past
// the cut-off: no engine block of that chunk is written after it, but for a
// unit already running (the server's copy fence covers those:
// docs/protocol.md "The copy fence").
struct CopyDeadlines {
  using Clock = std::chrono::steady_clock;
  std::vector<Clock::time_point> at;  // per chunk; empty: no deadlines
  std::vector<uint8_t> missed;        // per chunk, set by the backend
  // Set once the daemon stops copying (before it says Goodbye); may be null.
  const std::atomic<bool>* stopping = nullptr;

  bool any() const { return !at.empty() || stopping != nullptr; }
  bool Passed(size_t chunk, Clock::time_point now) const {
    if (stopping != nullptr && stopping->load(std::memory_order_relaxed)) return true;
    return !at.empty() && now >= at[chunk];
  }
};

// GPU-side completion of one Copy call (one request's job): the board slots
// it releases and, for a store, the engine's gate. A store reaches Copy only
// once the transfer worker saw its gate open (from the CPU: no stream of the
// daemon waits on a value an engine controls). A backend
// writes each slot's value word in stream order after the copy unit it
// signals (host: by the CPU, after the copies, in order); status words are
// written by the CPU before anything is enqueued (`status`) and again on
// failure by the transfer worker, which also releases every slot by the CPU
// after Copy returns when the copy failed or missed chunks. So a slot is
// always released, with the right status, by the time the reply is sent.
struct CopySignal {
  std::shared_ptr<MappedBoard> board;
  uint32_t sequence = 0;
  // Retrieve: one slot per layer range; ranges[k][g] is the (first, count)
  // slice of group g's layers in range k. Empty: one range of every layer.
  std::vector<uint32_t> range_slots;
  std::vector<std::vector<std::pair<uint32_t, uint32_t>>> ranges;
  // Store: the engine's stream writes `sequence` into gate_slot; the copy
  // starts after the worker sees it. done_slot is released once the
  // engine's blocks are read.
  std::optional<uint32_t> gate_slot;
  std::optional<uint32_t> done_slot;
  // Why to stop waiting for the gate (Ok: keep waiting): the request's
  // deadline passed (TimedOut) or the registration went away (Cancelled).
  // The worker then copies nothing, cuts off every chunk and releases
  // done_slot with that status.
  std::function<Status()> give_up;

  // Every slot the request signals on: its ranges', then done_slot.
  std::vector<uint32_t> slots() const {
    std::vector<uint32_t> all = range_slots;
    if (done_slot) all.push_back(*done_slot);
    return all;
  }
  // From the CPU: every slot released with `status` (a request refused,
  // with nothing to copy, or whose copy failed or missed chunks), or the
  // status every slot carries before the copy starts.
  void ReleaseAll(const Status& status) const {
    board->Release(slots(), sequence, uint32_t(status.code()));
  }
  void PresetStatus(uint32_t code) const { board->Preset(slots(), code); }
};

// One group's layers of one registration, as the copy engine addresses them.
struct GroupAddresses {
  kernels::GroupCopy group;  // layer_bases points into `layer_bases`
  std::vector<uint8_t*> layer_bases;
};

// What a registration computed once, passed down to every copy of it: its
// groups' addresses and the bytes of one flat chunk (its layout's
// chunk_bytes). The id is never reused, so a backend may cache what it
// derives from the groups (the CUDA lanes keep their layer addresses on the
// GPU) under it.
struct CopyLayout {
  uint64_t registration_id;
  uint64_t chunk_bytes;
  const std::vector<GroupAddresses>& groups;
  // The allocations the layers live in, so that a backend can address them
  // from another device (MappedAllocation::base_on); may be null.
  const std::vector<std::shared_ptr<MappedAllocation>>* allocations = nullptr;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual int num_devices() const = 0;
  virtual Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec& spec) = 0;
  // How L1 slabs are prepared (touched, pinned) and released.
  virtual SlabHooks slab_hooks() = 0;
  // Refuses a layout this backend cannot copy (a chunk larger than its
  // staging ring, say) before the registration is accepted.
  virtual Status CheckRegistration(int /*device*/, const std::vector<GroupAddresses>& /*groups*/,
                                   uint64_t /*chunk_bytes*/) const {
    return Status::Ok();
  }
  // Copies a batch of chunks of one registration, every group, in one
  // direction: Store gathers engine blocks into the flat L1 slots, Retrieve
  // scatters them back. Safe to call from the two lanes of one device at once;
  // each (device, direction) has one lane thread, so per-lane state needs no
  // lock. Returns once the data is in its destination.
  // slabs[i] is the L1 slab of chunks[i].flat (its L1Pool::Slot's): slots
  // adjacent in memory may be copied as one only inside one slab.
  // Chunks whose deadline passed are left out and marked in
  // deadlines.missed (sized to chunks by the caller). `signal` (may be null):
  // GPU-side completion of this call, see CopySignal.
  virtual Status Copy(Direction direction, int device, const CopyLayout& layout,
                      const std::vector<kernels::ChunkCopy>& chunks,
                      const std::vector<uint32_t>& slabs, CopyDeadlines& deadlines,
                      const CopySignal* signal = nullptr) = 0;
  // Makes an engine's completion board reachable from the copies of
  // `device` (CUDA: cudaHostRegister, device-mapped). The host backend
  // writes boards from the CPU.
  virtual Result<BoardMapping> MapBoard(int /*device*/, uint8_t* /*base*/, uint64_t /*bytes*/) {
    return BoardMapping{};
  }
  // Backend figures for `kvstash describe` (transfer mode, GPU memory held).
  virtual void Describe(nlohmann::json& /*out*/) const {}
  // The per-link queues the transfer workers keep up to date (bytes of the
  // jobs each device's lanes hold), where the backend decides anything from
  // them (multi-path retrieves and stores); null otherwise.
  virtual LinkLoads* link_loads() { return nullptr; }
};

}  // namespace kvstash::backends
