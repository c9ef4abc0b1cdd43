// The host backend: engine KV lives in POSIX shared memory and copies are CPU
// copies (the kernels' CPU twins) spread over a thread pool. It runs the same
// server, pool, index and protocol code as the CUDA backend, so the whole
// multi-process path is exercised on machines without a GPU.
//
// An engine can shrink its shared memory under the daemon: every copy of
// engine memory runs under MemoryFaultGuard, so such a copy fails with
// DeviceError naming the shared memory object instead of killing kvstashd.
#pragma once

#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "kvstash/backends/backend.h"
#include "kvstash/backends/client_shm.h"
#include "kvstash/runtime/thread_annotations.h"
#include "thread_pool.h"

namespace kvstash::backends {

// The names of the shared memory objects mapped now, by mapping address:
// read only to name the object in an error. Thread-safe.
class ShmNames {
 public:
  void Add(const uint8_t* base, uint64_t bytes, const std::string& name);
  void Remove(const uint8_t* base);
  // The object mapped at `address`, or "" when none is.
  std::string Find(uintptr_t address) const;

 private:
  mutable Mutex mutex_;
  std::map<uintptr_t, std::pair<uint64_t, std::string>> by_base_ KVSTASH_GUARDED_BY(mutex_);
};

// Maps `size_bytes` of a client's object opened and checked by client_shm.h
// (its descriptor may be closed after), named `name` in copy errors while
// mapped.
Result<std::shared_ptr<MappedAllocation>> MapHostMemory(const ClientShmFd& opened,
                                                        uint64_t size_bytes,
                                                        const std::string& name,
                                                        const std::shared_ptr<ShmNames>& names);

class HostBackend : public Backend {
 public:
  explicit HostBackend(size_t copy_threads);
  const char* name() const override { return "host"; }
  int num_devices() const override { return 1; }
  Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec& spec) override;
  SlabHooks slab_hooks() override;
  Status Copy(Direction direction, int device, const CopyLayout& layout,
              const std::vector<kernels::ChunkCopy>& chunks, const std::vector<uint32_t>& slabs,
              CopyDeadlines& deadlines, const CopySignal* signal = nullptr) override;

 private:
  // Copies one layer of one chunk; a SIGBUS on the engine layer becomes an
  // error naming the shared memory object.
  Status CopyGuarded(Direction direction, const kernels::PreparedCpuGroup& layer,
                     const kernels::ChunkCopy& chunk) const;
  std::shared_ptr<ShmNames> names_ = std::make_shared<ShmNames>();
  ThreadPool pool_;
};

}  // namespace kvstash::backends
