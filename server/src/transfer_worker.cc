// Lanes, batching and completion.
#include "transfer_worker.h"

#include <algorithm>
#include <sched.h>

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
    : backend_(backend), device_(device), direction_(direction), busy_poll_(busy_poll),
      trace_(trace), thread_([this] { Loop(); }) {}

TransferWorker::Lane::~Lane() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

void TransferWorker::Lane::Submit(TransferJob job) {
  job.registration->BeginWork();
  {
    std::lock_guard<std::mutex> lock(mutex_);
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

void TransferWorker::Lane::Loop() {
  for (;;) {
    std::vector<TransferJob> batch;
    if (taken_ > 0) PollForJob();  // not before the first job: an idle daemon sleeps
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [this] { return stopping_ || !queue_.empty(); });
      if (queue_.empty()) return;  // stopping, and everything queued is done
      for (auto& job : queue_) batch.push_back(std::move(job));
      queue_.clear();
    }
    taken_ += batch.size();
    if (trace_) {
      for (const TransferJob& job : batch) trace_->Mark(job.request_id, TraceStage::kLanePickup);
    }
    RunBatch(batch);
  }
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
    CopyDeadlines deadlines;
    bool any_deadline = false;
    for (size_t j = begin; j < end; ++j) any_deadline |= jobs[j].deadline.has_value();
    for (size_t j = begin; j < end; ++j) {
      chunks.insert(chunks.end(), jobs[j].chunks.begin(), jobs[j].chunks.end());
      if (any_deadline) {
        deadlines.at.insert(deadlines.at.end(), jobs[j].chunks.size(),
                            jobs[j].deadline.value_or(CopyDeadlines::Clock::time_point::max()));
      }
    }
    deadlines.missed.assign(chunks.size(), 0);
    const Registration& registration = *jobs[begin].registration;
    const CopySignal* signal = jobs[begin].signal ? &*jobs[begin].signal : nullptr;
    const Status status =
        chunks.empty() ? Status::Ok()
                       : backend_.Copy(direction_, device_, registration.groups, chunks, deadlines, signal);
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
      jobs[j].complete(status, missed);
      jobs[j].registration->EndWork();
    }
    begin = end;
  }
}

}  // namespace kvstash::server
