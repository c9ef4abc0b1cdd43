// POSIX shared memory and CPU copies.
#include "host_backend.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <thread>

#include "backends_logger.h"
#include "kvstash/backends/client_shm.h"
#include "kvstash/backends/memory_fault_guard.h"
#include "peer_fd_allocation.h"

namespace kvstash::backends {

std::string AllocationSpec::identity() const {
  if (kind == Kind::kHostShm) return "shm:" + shm_name;
  if (kind == Kind::kPeerFd) {
    return "fd:" + std::to_string(opener ? opener->pid : 0) + ":" + std::to_string(peer_fd);
  }
  std::string id = "cuda:";
  id.append(reinterpret_cast<const char*>(ipc_handle.data()), ipc_handle.size());
  return id;
}

namespace {

class ShmAllocation : public MappedAllocation {
 public:
  ShmAllocation(uint8_t* base, uint64_t size, const std::string& name,
                std::shared_ptr<ShmNames> names)
      : base_(base), size_(size), names_(std::move(names)) {
    names_->Add(base_, size_, name);
  }
  ~ShmAllocation() override {
    names_->Remove(base_);
    munmap(base_, size_);
  }
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return 0; }

 private:
  uint8_t* base_;
  uint64_t size_;
  std::shared_ptr<ShmNames> names_;
};

// One layer of one group, as a copy task names it.
struct LayerRef {
  uint32_t group;
  uint32_t layer;
};

// Each group checked and its heads merged once per call, before any task
// runs: a group the CPU twins cannot copy fails the call with nothing
// copied, and the tasks check only their chunk.
Result<std::vector<kernels::PreparedCpuGroup>> PrepareGroups(const CopyLayout& layout) {
  const std::vector<GroupAddresses>& groups = layout.groups;
  std::vector<kernels::PreparedCpuGroup> prepared;
  prepared.reserve(groups.size());
  for (size_t g = 0; g < groups.size(); ++g) {
    Result<kernels::PreparedCpuGroup> group = kernels::PrepareGroupCpu(groups[g].group);
    if (!group.ok()) {
      return Status(group.status().code(), "group " + std::to_string(g) + " of registration " +
                                               std::to_string(layout.registration_id) +
                                               " cannot be copied: " + group.status().message());
    }
    prepared.push_back(*group);
  }
  return prepared;
}

// The layer ranges, copied one after the other, each range's slot released
// after its copies (one range of every layer without a signal).
Result<std::vector<std::vector<LayerRef>>> LayerRanges(const std::vector<GroupAddresses>& groups,
                                                       const CopySignal* signal) {
  std::vector<std::vector<LayerRef>> ranges;
  if (signal == nullptr || signal->ranges.empty()) {
    std::vector<LayerRef>& all = ranges.emplace_back();
    for (size_t g = 0; g < groups.size(); ++g) {
      for (uint32_t l = 0; l < groups[g].group.shape.num_layers; ++l)
        all.push_back({uint32_t(g), l});
    }
    return ranges;
  }
  for (const auto& slices : signal->ranges) {
    std::vector<LayerRef>& range = ranges.emplace_back();
    for (size_t g = 0; g < slices.size() && g < groups.size(); ++g) {
      const auto [first, count] = slices[g];
      // Slices come from the registration's own layers; checked still,
      // since PreparedCpuGroup::Layers trusts its bounds.
      if (uint64_t{first} + count > groups[g].group.shape.num_layers) {
        return Status::Internal(
            "layer range " + std::to_string(ranges.size() - 1) + " takes layers [" +
            std::to_string(first) + ", " + std::to_string(uint64_t{first} + count) + ") of group " +
            std::to_string(g) + ", which has " + std::to_string(groups[g].group.shape.num_layers));
      }
      for (uint32_t l = 0; l < count; ++l) range.push_back({uint32_t(g), first + l});
    }
  }
  return ranges;
}

// One layer of one chunk, as RunGuarded's body.
struct LayerCopy {
  Direction direction;
  const kernels::PreparedCpuGroup* layer;
  const kernels::ChunkCopy* chunk;
  Status status;  // set only when the copy ran to its end
};

void RunLayerCopy(void* arg) {
  auto* copy = static_cast<LayerCopy*>(arg);
  // The chunk's checks (the group's ran before any task) build Status values
  // (strings): they run to completion before any engine byte is touched, so
  // a jump back from a fault never skips a live destructor that owns memory.
  // LayerCopy::status is assigned only after the copy finished.
  Status status = copy->direction == Direction::kStore
                      ? kernels::GatherChunksCpu(*copy->layer, copy->chunk, 1)
                      : kernels::ScatterChunksCpu(*copy->layer, copy->chunk, 1);
  copy->status = std::move(status);
}

}  // namespace

void ShmNames::Add(const uint8_t* base, uint64_t bytes, const std::string& name) {
  MutexLock lock(mutex_);
  by_base_[reinterpret_cast<uintptr_t>(base)] = {bytes, name};
}

void ShmNames::Remove(const uint8_t* base) {
  MutexLock lock(mutex_);
  by_base_.erase(reinterpret_cast<uintptr_t>(base));
}

std::string ShmNames::Find(uintptr_t address) const {
  MutexLock lock(mutex_);
  auto it = by_base_.upper_bound(address);
  if (it == by_base_.begin()) return "";
  --it;
  return address < it->first + it->second.first ? it->second.second : "";
}

HostBackend::HostBackend(size_t copy_threads) : pool_(copy_threads > 0 ? copy_threads - 1 : 0) {
  MemoryFaultGuard::Install();
}

Result<std::shared_ptr<MappedAllocation>> HostBackend::Open(const AllocationSpec& spec) {
  if (spec.kind == AllocationSpec::Kind::kPeerFd) return OpenPeerFd(spec, names_);
  if (spec.kind != AllocationSpec::Kind::kHostShm) {
    return Status::InvalidArgument(
        "the host backend takes POSIX shared memory allocations, not CUDA IPC handles; "
        "start kvstashd with --backend cuda on a machine with a GPU");
  }
  // Never 0 bytes: wire_codec.cc refuses an allocation that declares 0.
  Result<ClientShmFd> opened = OpenClientShm(
      {"shared memory", spec.shm_name, /*writable=*/true, spec.size_bytes, spec.opener});
  if (!opened.ok()) return opened.status();
  return MapHostMemory(*opened, spec.size_bytes, spec.shm_name, names_);
}

Result<std::shared_ptr<MappedAllocation>> MapHostMemory(const ClientShmFd& opened,
                                                        uint64_t size_bytes,
                                                        const std::string& name,
                                                        const std::shared_ptr<ShmNames>& names) {
  void* base = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, opened.fd(), 0);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of " + name + " failed: " + std::strerror(errno));
  }
  return std::shared_ptr<MappedAllocation>(
      std::make_shared<ShmAllocation>(static_cast<uint8_t*>(base), size_bytes, name, names));
}

SlabHooks HostBackend::slab_hooks() {
  SlabHooks hooks;
  // Touch every page now, in the background, so the first stores do not pay
  // page faults on the hot path.
  hooks.prepare = [](uint8_t* data, uint64_t bytes) {
    const long page = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < bytes; off += uint64_t(page)) data[off] = 0;
    return Status::Ok();
  };
  return hooks;
}

Status HostBackend::Copy(Direction direction, int /*device*/, const CopyLayout& layout,
                         const std::vector<kernels::ChunkCopy>& chunks,
                         const std::vector<uint32_t>& /*slabs*/, CopyDeadlines& deadlines,
                         const CopySignal* signal) {
  const char* const what = direction == Direction::kStore ? "store" : "retrieve";
  deadlines.missed.assign(chunks.size(), 0);
  Result<std::vector<kernels::PreparedCpuGroup>> prepared = PrepareGroups(layout);
  if (!prepared.ok()) {
    Logger()->warn("{} of {} chunks refused: {}", what, chunks.size(), prepared.status().message());
    return prepared.status();  // the transfer worker releases the slots, with the error
  }
  // One task per (layer, chunk): a single large chunk spreads over every
  // thread, and so do many small ones. The task slices its layer out of the
  // prepared group. Tasks are taken chunk by chunk, a chunk's layers in a
  // row: engine layouts that keep a token's layers together (SGLang's
  // page_first) put a chunk's layers in the same few pages, which then stay
  // in the TLB and caches while every thread works on them.
  Result<std::vector<std::vector<LayerRef>>> ranges = LayerRanges(layout.groups, signal);
  if (!ranges.ok()) return ranges.status();
  // Each task is a copy unit: it checks its chunk's deadline before it
  // starts (tasks of one chunk may mark it from several threads).
  std::unique_ptr<std::atomic<bool>[]> missed(new std::atomic<bool>[chunks.size()]);
  for (size_t c = 0; c < chunks.size(); ++c) missed[c] = false;
  for (size_t r = 0; r < ranges->size(); ++r) {
    const std::vector<LayerRef>& range = (*ranges)[r];
    const size_t tasks = range.size() * chunks.size();
    std::vector<Status> failures(tasks);
    pool_.ParallelFor(tasks, [&](size_t i) {
      const size_t c = i / range.size();
      if (deadlines.any() && (missed[c].load(std::memory_order_relaxed) ||
                              deadlines.Passed(c, std::chrono::steady_clock::now()))) {
        missed[c].store(true, std::memory_order_relaxed);
        return;
      }
      const LayerRef at = range[i % range.size()];
      failures[i] = CopyGuarded(direction, (*prepared)[at.group].Layers(at.layer, 1), chunks[c]);
    });
    for (size_t c = 0; c < chunks.size(); ++c) deadlines.missed[c] = missed[c].load() ? 1 : 0;
    for (Status& s : failures) {
      if (s.ok()) continue;
      Logger()->warn("{} of {} chunks failed: {}", what, chunks.size(), s.message());
      return s;  // the transfer worker releases the slots, with the error
    }
    // In order, after the range's copies, as a GPU stream would. A range
    // with missed chunks is released by the transfer worker, with TimedOut.
    const bool any_missed =
        std::find(deadlines.missed.begin(), deadlines.missed.end(), 1) != deadlines.missed.end();
    if (signal != nullptr && r < signal->range_slots.size() && !any_missed) {
      signal->board->WriteValue(signal->range_slots[r], signal->sequence);
    }
  }
  // The engine's blocks are read: they may be reused.
  if (signal != nullptr && signal->done_slot)
    signal->board->WriteValue(*signal->done_slot, signal->sequence);
  return Status::Ok();
}

Status HostBackend::CopyGuarded(Direction direction, const kernels::PreparedCpuGroup& layer,
                                const kernels::ChunkCopy& chunk) const {
  LayerCopy copy{direction, &layer, &chunk, Status::Internal("copy did not finish")};
  const kernels::GroupCopy& group = layer.group();
  const uint8_t* engine = group.layer_bases[0];
  uintptr_t fault = 0;
  // Merged heads span the same bytes: the extent is the engine layer's.
  if (MemoryFaultGuard::RunGuarded(engine, LayerExtentBytes(group.geometry), RunLayerCopy, &copy,
                                   &fault)) {
    return copy.status;
  }
  std::string name = names_->Find(fault);
  char offset[32];
  std::snprintf(offset, sizeof(offset), "%#lx",
                static_cast<unsigned long>(fault - uintptr_t(engine)));
  const std::string what = "shared memory " + (name.empty() ? std::string("of the engine") : name) +
                           " shrank under the daemon (SIGBUS at layer offset " + offset +
                           "): the engine truncated or resized it after registering";
  return Status::DeviceError(what);
}

}  // namespace kvstash::backends
