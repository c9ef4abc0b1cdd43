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

#include "kvstash/backends/backend.h"
#include "kvstash/runtime/stage_trace.h"
#include "kvstash/runtime/thread_annotations.h"
#include "registry.h"

namespace kvstash::server {

using backends::LinkLoads;

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

  // Appends a chunk in L1 slab `slab` and its ids [ids, ids + num_ids),
  // copied here: the one copy the daemon makes of them before the lane's
  // (copy.block_ids is set by Seal).
  void Add(const kernels::ChunkCopy& copy, uint32_t slab, const uint32_t* ids, size_t num_ids) {
    chunks.push_back(copy);
    slabs.push_back(slab);
    chunks.back().num_block_ids = uint32_t(num_ids);
    block_ids.insert(block_ids.end(), ids, ids + num_ids);
  }
  // Points every chunk at its ids; block_ids does not grow after this.
  void Seal() {
    const uint32_t* next = block_ids.data();
    for (kernels::ChunkCopy& c : chunks) {
      c.block_ids = next;
      next += c.num_block_ids;
    }
  }
  // Called once, with the copy's status, per chunk of this job whether it
  // was cut off (left out, nothing of it trusted), and why those were: the
  // deadline passed (TimedOut), the engine gave the request up (Cancelled),
  // the daemon is stopping (Unavailable), the board could not be read
  // (DeviceError)...
  std::function<void(const Status& copied, const std::vector<uint8_t>& cut, const Status& cut_why)>
      complete;
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
  // trace: may be null; outlives the worker. `stopping`: set once the
  // daemon stops copying (it outlives the worker): from then on every job
  // is cut off, queued or gated, and copies stop at their next unit.
  TransferWorker(Backend& backend, int device, std::chrono::microseconds busy_poll,
                 const std::atomic<bool>& stopping, StageTrace* trace = nullptr);
  ~TransferWorker();  // finishes queued jobs, then joins
  TransferWorker(const TransferWorker&) = delete;
  TransferWorker& operator=(const TransferWorker&) = delete;

  void Submit(Direction direction, TransferJob job);
  // Makes the lanes look at `stopping` now (stores waiting for a gate end).
  void Wake();
  // Stores held aside until their engine opens their gate: not copies in
  // flight, and no reason for anyone to spin. Any thread.
  uint64_t gates_waiting() const { return store_.gates_waiting() + retrieve_.gates_waiting(); }

 private:
  class Lane {
   public:
    Lane(Backend& backend, int device, Direction direction, std::chrono::microseconds busy_poll,
         const std::atomic<bool>& stopping, StageTrace* trace);
    ~Lane();
    void Submit(TransferJob job);
    void Wake();
    uint64_t gates_waiting() const { return gates_waiting_.load(std::memory_order_relaxed); }

   private:
    void Loop();
    // Polls on the core until a job is queued or busy_poll_ has passed.
    void PollForJob() const;
    void RunBatch(std::vector<TransferJob>& jobs);
    // Holds every job's fence byte (copy_fence.h) and keeps those it holds
    // (and those without a fence); the others (given up by their engine,
    // or the daemon stopping) are finished, nothing copied.
    void HoldFences(std::vector<TransferJob>& jobs);
    // Moves the gated stores whose gate the engine's stream opened into
    // `ready`; a store whose gate can no longer open (deadline passed,
    // engine gone or gave it up, board unreadable, the daemon stopping) is
    // finished: nothing stored, every chunk cut off, its "blocks reusable"
    // slot released with the cause.
    void TakeOpenGates(std::vector<TransferJob>& ready, bool destroying);
    // How long the lane may sleep before it looks at the gates again: short
    // for a gate just asked for, up to kGateCheckMax for one long closed.
    Clock::duration NextGateCheck(Clock::time_point now) const;
    // Finishes a job that copies nothing: every chunk cut off for `why`.
    static void CutOff(TransferJob& job, const Status& why);
    // The job leaves this lane's link queue (it completed or was dropped).
    void Dequeue(const TransferJob& job);
    // Releases every slot of a failed or partly cut-off job, with the
    // copy's error, else why its chunks were cut off.
    static void ReleaseOnFailure(const CopySignal& signal, const Status& status,
                                 const std::vector<uint8_t>& cut, const Status& cut_why);
    Backend& backend_;
    LinkLoads* const loads_;  // null: the backend decides nothing from them
    const int device_;
    const Direction direction_;
    const std::chrono::microseconds busy_poll_;
    StageTrace* const trace_;
    const std::atomic<bool>& stopping_copies_;
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
    struct Gated {
      TransferJob job;
      Clock::time_point since;  // when the lane took it
    };
    std::vector<Gated> gated_;
    // gated_.size(), for other threads; lowered before a job leaves gated_
    // is completed, so it never counts a store whose reply was sent.
    std::atomic<uint64_t> gates_waiting_{0};
    bool woken_ KVSTASH_GUARDED_BY(mutex_) = false;     // Wake() since the last look
    bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;  // the worker is being destroyed
    std::thread thread_;
  };
  Lane store_;
  Lane retrieve_;
};

}  // namespace kvstash::server
