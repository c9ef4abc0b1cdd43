// One transfer worker per device, with a lane (thread + queue) per direction
// so stores and retrieves overlap (PCIe is full duplex). Each lane takes every
// job queued since its last batch and copies jobs of one registration in one
// backend call. Completion callbacks run on the lane thread. With busy
// polling, a lane that finished a batch polls its queue on a core for that
// long before it sleeps.
// Thread-safe: Submit from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include "backend.h"
#include "kvstash/stage_trace.h"
#include "kvstash/thread_annotations.h"
#include "registry.h"

namespace kvstash::server {

struct TransferJob {
  std::shared_ptr<Registration> registration;
  PeerId owner;                               // who asked
  uint64_t request_id = 0;                    // for the stage trace
  std::optional<Clock::time_point> deadline;  // no engine block is written after it
  // Chunk i's num_block_ids ids follow chunk i - 1's in `block_ids`; its
  // block_ids pointer is set once, when the job is submitted (Seal).
  // slabs[i]: the L1 slab of chunk i's slot.
  std::vector<kernels::ChunkCopy> chunks;
  std::vector<uint32_t> slabs;
  std::vector<uint32_t> block_ids;

  // Appends a chunk in L1 slab `slab` and its block ids (copy.block_ids is
  // set by Seal).
  void Add(const kernels::ChunkCopy& copy, uint32_t slab, const std::vector<uint32_t>& ids) {
    chunks.push_back(copy);
    slabs.push_back(slab);
    chunks.back().num_block_ids = uint32_t(ids.size());
    block_ids.insert(block_ids.end(), ids.begin(), ids.end());
  }
  // Points every chunk at its ids; block_ids does not grow after this.
  void Seal() {
    const uint32_t* next = block_ids.data();
    for (kernels::ChunkCopy& c : chunks) {
      c.block_ids = next;
      next += c.num_block_ids;
    }
  }
  // Called once, with the copy's status and, per chunk of this job, whether
  // it was left out because the deadline had passed.
  std::function<void(const Status&, const std::vector<uint8_t>& missed)> complete;
  // GPU-side completion of this job (copied alone, never batched with
  // others). After the copy, a failed or partly missed job has every slot
  // released by the CPU with its error, before `complete` runs.
  std::optional<CopySignal> signal;
  // Bytes this job adds to its lane's link queue (LinkLoads) while queued
  // or in flight; set by the lane when it is submitted.
  uint64_t queued_bytes = 0;
};

class TransferWorker {
 public:
  // trace: may be null; outlives the worker.
  TransferWorker(Backend& backend, int device, std::chrono::microseconds busy_poll,
                 StageTrace* trace = nullptr);
  ~TransferWorker();  // finishes queued jobs, then joins
  TransferWorker(const TransferWorker&) = delete;
  TransferWorker& operator=(const TransferWorker&) = delete;

  void Submit(Direction direction, TransferJob job);

 private:
  class Lane {
   public:
    Lane(Backend& backend, int device, Direction direction, std::chrono::microseconds busy_poll,
         StageTrace* trace);
    ~Lane();
    void Submit(TransferJob job);

   private:
    void Loop();
    // Polls on the core until a job is queued or busy_poll_ has passed.
    void PollForJob() const;
    void RunBatch(std::vector<TransferJob>& jobs);
    // Moves the gated stores whose gate the engine's stream opened into
    // `ready`; a store whose gate can no longer open (deadline passed,
    // engine gone, board unreadable, the daemon stopping) is finished:
    // nothing stored, every chunk missed, its "blocks reusable" slot
    // released with TimedOut.
    void TakeOpenGates(std::vector<TransferJob>& ready, bool stopping);
    // The job leaves this lane's link queue (it completed or was dropped).
    void Dequeue(const TransferJob& job);
    // Releases every slot of a failed or partly missed job, with its error.
    static void ReleaseOnFailure(const CopySignal& signal, const Status& status,
                                 const std::vector<uint8_t>& missed);
    Backend& backend_;
    LinkLoads* const loads_;  // null: the backend decides nothing from them
    const int device_;
    const Direction direction_;
    const std::chrono::microseconds busy_poll_;
    StageTrace* const trace_;
    std::atomic<uint64_t> submitted_{0};  // jobs ever queued: polling reads it without the lock
    uint64_t taken_ = 0;                  // jobs ever taken; lane thread only
    Mutex mutex_;
    std::condition_variable wake_;
    std::deque<TransferJob> queue_ KVSTASH_GUARDED_BY(mutex_);
    // Stores waiting for the engine's stream to open their gate; lane
    // thread only. The lane checks the gate word from the CPU and starts
    // the copy once it is open: no stream of the daemon ever waits on a
    // value an engine controls, so a gate never opened can stall nothing
    // but its own store.
    std::vector<TransferJob> gated_;
    bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
    std::thread thread_;
  };
  Lane store_;
  Lane retrieve_;
};

}  // namespace kvstash::server
