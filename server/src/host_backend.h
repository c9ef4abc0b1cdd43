// The host backend: engine KV lives in POSIX shared memory and copies are CPU
// copies (the kernels' CPU twins) spread over a thread pool. It runs the same
// server, pool, index and protocol code as the CUDA backend, so the whole
// multi-process path is exercised on machines without a GPU.
#pragma once

#include <memory>

#include "backend.h"
#include "thread_pool.h"

namespace kvstash::server {

class HostBackend : public Backend {
 public:
  explicit HostBackend(size_t copy_threads);
  const char* name() const override { return "host"; }
  int num_devices() const override { return 1; }
  Result<std::shared_ptr<MappedAllocation>> Open(const AllocationSpec& spec) override;
  SlabHooks slab_hooks() override;
  Status Copy(Direction direction, int device, const std::vector<GroupAddresses>& groups,
              const std::vector<kernels::ChunkCopy>& chunks, CopyDeadlines& deadlines) override;

 private:
  ThreadPool pool_;
};

}  // namespace kvstash::server
