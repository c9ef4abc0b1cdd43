// Lanes, batching and completion.
#include "transfer_worker.h"
#include "kvstash/thread_annotations.h"
#include "link_loads.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>

namespace kvstash::server {

TransferWorker::TransferWorker(Backend& backend, int device, std::chrono::microseconds busy_poll,
                               StageTrace* trace)
    : store_(backend, device, Direction::kStore, busy_poll, trace),
      retrieve_(backend, device, Direction::kRetrieve, busy_poll, trace) {}

TransferWorker::~TransferWorker() = default;

void TransferWorker::Submit(Direction direction, TransferJob job) {
  (direction == Direction::kStore ? store_ : retrieve_).Submit(std::move(job));
}

TransferWorker::Lane::Lane(Backend& backend, int device, Direction direction,
                           std::chrono::microseconds busy_poll, StageTrace* trace)
    : backend_(backend),
      loads_(backend.link_loads()),
      device_(device),
      direction_(direction),
      busy_poll_(busy_poll),
      trace_(trace),
      thread_([this] { Loop(); }) {}

TransferWorker::Lane::~Lane() {
  {
    MutexLock lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TransferWorker::Lane::Submit(TransferJob job) {
  job.registration->BeginWork();
  if (loads_ != nullptr) {
    job.queued_bytes = job.chunks.size() * job.registration->layout.chunk_bytes();
    loads_->Add(device_, direction_, job.queued_bytes);
  }
  {
    MutexLock lock(mutex_);
    queue_.push_back(std::move(job));
  }
  submitted_.fetch_add(1, std::memory_order_release);
  wake_.notify_one();
}

void TransferWorker::Lane::PollForJob() const {
  if (busy_poll_.count() == 0) return;
  const auto until = std::chrono::steady_clock::now() + busy_poll_;
  while (std::chrono::steady_clock::now() < until) {
    if (submitted_.load(std::memory_order_acquire) != taken_) return;
    sched_yield();  // a thread waiting for this core (a copy) comes first
  }
}

namespace {

// How often a lane looks at the gates of the stores it holds.
constexpr auto kGateCheck = std::chrono::microseconds(10);

bool GateOpen(const CopySignal& signal, bool* unreadable) {
  const std::optional<uint32_t> value = signal.board->Value(*signal.gate_slot);
  *unreadable = !value;
  return value && int32_t(*value - signal.sequence) >= 0;  // sequences wrap
}

}  // namespace

void TransferWorker::Lane::Loop() {
  // Gate checks sleep 10 us at a time: not 50 us more (the default slack).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  bool stopping = false;
  for (;;) {
    std::vector<TransferJob> batch;
    if (taken_ > 0 && gated_.empty())
      PollForJob();  // not before the first job: an idle daemon sleeps
    {
      MutexLock lock(mutex_);
      const auto queued = [this]()
                              KVSTASH_REQUIRES(mutex_) { return stopping_ || !queue_.empty(); };
      if (gated_.empty()) {
        wake_.wait(lock.native(), queued);
      } else {
        wake_.wait_for(lock.native(), kGateCheck, queued);
      }
      stopping = stopping_;
      if (queue_.empty() && gated_.empty() && stopping) return;  // everything queued is done
      for (auto& job : queue_) batch.push_back(std::move(job));
      queue_.clear();
    }
    taken_ += batch.size();
    if (trace_) {
      for (const TransferJob& job : batch) trace_->Mark(job.request_id, TraceStage::kLanePickup);
    }
    std::vector<TransferJob> ready;
    for (TransferJob& job : batch) {
      (job.signal && job.signal->gate_slot ? gated_ : ready).push_back(std::move(job));
    }
    TakeOpenGates(ready, stopping);
    if (!ready.empty()) RunBatch(ready);
  }
}

void TransferWorker::Lane::TakeOpenGates(std::vector<TransferJob>& ready, bool stopping) {
  for (size_t i = 0; i < gated_.size();) {
    TransferJob& job = gated_[i];
    bool unreadable = false;
    const bool open = GateOpen(*job.signal, &unreadable);
    if (!open && !unreadable && !stopping && !job.signal->give_up()) {
      ++i;
      continue;
    }
    if (open) {
      ready.push_back(std::move(job));
    } else {
      // Never copied: what the engine's blocks hold is not known to be its
      // KV. The store's slots report TimedOut (or the board's fault).
      const std::vector<uint8_t> missed(job.chunks.size(), 1);
      const Status why = unreadable ? Status::DeviceError("the completion board could not be read")
                                    : Status::TimedOut("the store's gate was never opened");
      ReleaseOnFailure(*job.signal, why, missed);
      Dequeue(job);
      job.complete(unreadable ? why : Status::Ok(), missed);
      job.registration->EndWork();
    }
    gated_.erase(gated_.begin() + long(i));
  }
}

void TransferWorker::Lane::Dequeue(const TransferJob& job) {
  if (loads_ != nullptr) loads_->Remove(device_, direction_, job.queued_bytes);
}

void TransferWorker::Lane::ReleaseOnFailure(const CopySignal& signal, const Status& status,
                                            const std::vector<uint8_t>& missed) {
  const bool any_missed = std::find(missed.begin(), missed.end(), 1) != missed.end();
  if (status.ok() && !any_missed) return;  // the copy released every slot itself
  const uint32_t code = uint32_t(status.ok() ? StatusCode::kTimedOut : status.code());
  // Status words first, then the values, so that whoever sees a value
  // released also sees the final status of every slot.
  std::vector<uint32_t> slots = signal.range_slots;
  if (signal.done_slot) slots.push_back(*signal.done_slot);
  for (uint32_t slot : slots) signal.board->WriteStatus(slot, code);
  for (uint32_t slot : slots) signal.board->WriteValue(slot, signal.sequence);
}

void TransferWorker::Lane::RunBatch(std::vector<TransferJob>& jobs) {
  // Consecutive jobs of one registration share one copy call.
  size_t begin = 0;
  while (begin < jobs.size()) {
    size_t end = begin + 1;
    while (end < jobs.size() && !jobs[begin].signal && !jobs[end].signal &&
           jobs[end].registration == jobs[begin].registration) {
      ++end;
    }
    std::vector<kernels::ChunkCopy> chunks;
    std::vector<uint32_t> slabs;
    CopyDeadlines deadlines;
    bool any_deadline = false;
    for (size_t j = begin; j < end; ++j) any_deadline |= jobs[j].deadline.has_value();
    for (size_t j = begin; j < end; ++j) {
      chunks.insert(chunks.end(), jobs[j].chunks.begin(), jobs[j].chunks.end());
      slabs.insert(slabs.end(), jobs[j].slabs.begin(), jobs[j].slabs.end());
      if (any_deadline) {
        deadlines.at.insert(deadlines.at.end(), jobs[j].chunks.size(),
                            jobs[j].deadline.value_or(CopyDeadlines::Clock::time_point::max()));
      }
    }
    deadlines.missed.assign(chunks.size(), 0);
    const Registration& registration = *jobs[begin].registration;
    const CopySignal* signal = jobs[begin].signal ? &*jobs[begin].signal : nullptr;
    const CopyLayout layout{registration.id, registration.layout.chunk_bytes(), registration.groups,
                            &registration.allocations};
    const Status status = chunks.empty() ? Status::Ok()
                                         : backend_.Copy(direction_, device_, layout, chunks, slabs,
                                                         deadlines, signal);
    deadlines.missed.resize(chunks.size());
    if (trace_) {
      for (size_t j = begin; j < end; ++j) trace_->Mark(jobs[j].request_id, TraceStage::kCopyDone);
    }
    if (signal != nullptr) ReleaseOnFailure(*signal, status, deadlines.missed);
    size_t offset = 0;
    for (size_t j = begin; j < end; ++j) {
      const size_t n = jobs[j].chunks.size();
      const std::vector<uint8_t> missed(deadlines.missed.begin() + offset,
                                        deadlines.missed.begin() + offset + n);
      offset += n;
      Dequeue(jobs[j]);
      jobs[j].complete(status, missed);
      jobs[j].registration->EndWork();
    }
    begin = end;
  }
}

}  // namespace kvstash::server
