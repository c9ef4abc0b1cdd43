// Lanes, batching and completion.
#include "transfer_worker.h"
#include "kvstash/backends/link_loads.h"
#include "kvstash/runtime/thread_annotations.h"

#include <sched.h>
#include <sys/prctl.h>

#include <algorithm>

namespace kvstash::server {

namespace {

// How often a lane looks at the gates of the stores it holds: every
// kGateCheckMin while a gate is young (an engine opens it within
// microseconds to milliseconds), then less and less often, so that a gate
// never opened costs about nothing (100 looks a second).
constexpr auto kGateCheckMin = std::chrono::microseconds(10);
constexpr auto kGateCheckMax = std::chrono::milliseconds(10);
constexpr int kGateBackoffDivisor = 16;  // the wait grows with the gate's age

bool GateOpen(const CopySignal& signal, bool* unreadable) {
  const std::optional<uint32_t> value = signal.board->Value(*signal.gate_slot);
  *unreadable = !value;
  return value && int32_t(*value - signal.sequence) >= 0;  // sequences wrap
}

Status StoppingCutOff() {
  return Status::Unavailable("kvstashd is stopping; this chunk was not copied");
}

Status GivenUpCutOff() {
  return Status::Cancelled(
      "the engine gave this request up (its deadline passed, it lost kvstashd, or it is gone); "
      "this chunk was not copied");
}

Status DeadlineCutOff() {
  return Status::TimedOut(
      "the request's deadline passed before this chunk was copied; "
      "none of its blocks was written after it");
}

}  // namespace

TransferWorker::TransferWorker(Backend& backend, int device, std::chrono::microseconds busy_poll,
                               const std::atomic<bool>& stopping, StageTrace* trace)
    : store_(backend, device, Direction::kStore, busy_poll, stopping, trace),
      retrieve_(backend, device, Direction::kRetrieve, busy_poll, stopping, trace) {}

TransferWorker::~TransferWorker() = default;

void TransferWorker::Submit(Direction direction, TransferJob job) {
  (direction == Direction::kStore ? store_ : retrieve_).Submit(std::move(job));
}

void TransferWorker::Wake() {
  store_.Wake();
  retrieve_.Wake();
}

TransferWorker::Lane::Lane(Backend& backend, int device, Direction direction,
                           std::chrono::microseconds busy_poll, const std::atomic<bool>& stopping,
                           StageTrace* trace)
    : backend_(backend),
      loads_(backend.link_loads()),
      device_(device),
      direction_(direction),
      busy_poll_(busy_poll),
      trace_(trace),
      stopping_copies_(stopping),
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

void TransferWorker::Lane::Wake() {
  {
    MutexLock lock(mutex_);
    woken_ = true;
  }
  wake_.notify_all();
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
  // Gate checks sleep 10 us at a time: not 50 us more (the default slack).
  prctl(PR_SET_TIMERSLACK, 1000UL, 0, 0, 0);
  bool destroying = false;
  for (;;) {
    std::vector<TransferJob> batch;
    if (taken_ > 0 && gated_.empty())
      PollForJob();  // not before the first job: an idle daemon sleeps
    {
      MutexLock lock(mutex_);
      const auto queued = [this]() KVSTASH_REQUIRES(mutex_) {
        return stopping_ || woken_ || !queue_.empty();
      };
      if (gated_.empty()) {
        wake_.wait(lock.native(), queued);
      } else {
        wake_.wait_for(lock.native(), NextGateCheck(Clock::now()), queued);
      }
      woken_ = false;
      destroying = stopping_;
      if (queue_.empty() && gated_.empty() && destroying) return;  // everything queued is done
      for (auto& job : queue_) batch.push_back(std::move(job));
      queue_.clear();
    }
    taken_ += batch.size();
    if (trace_) {
      for (const TransferJob& job : batch) trace_->Mark(job.request_id, TraceStage::kLanePickup);
    }
    std::vector<TransferJob> ready;
    const Clock::time_point now = Clock::now();
    for (TransferJob& job : batch) {
      if (job.signal && job.signal->gate_slot) {
        gated_.push_back(Gated{std::move(job), now});
        gates_waiting_.fetch_add(1, std::memory_order_relaxed);
      } else {
        ready.push_back(std::move(job));
      }
    }
    TakeOpenGates(ready, destroying);
    HoldFences(ready);
    if (!ready.empty()) RunBatch(ready);
  }
}

Clock::duration TransferWorker::Lane::NextGateCheck(Clock::time_point now) const {
  Clock::time_point youngest = gated_.front().since;
  for (const Gated& g : gated_) youngest = std::max(youngest, g.since);
  const Clock::duration wait = (now - youngest) / kGateBackoffDivisor;
  return std::clamp<Clock::duration>(wait, kGateCheckMin, kGateCheckMax);
}

void TransferWorker::Lane::CutOff(TransferJob& job, const Status& why) {
  const std::vector<uint8_t> cut(job.chunks.size(), 1);
  if (job.signal) ReleaseOnFailure(*job.signal, Status::Ok(), cut, why);
  job.complete(Status::Ok(), cut, why);
  job.registration->EndWork();
}

void TransferWorker::Lane::TakeOpenGates(std::vector<TransferJob>& ready, bool destroying) {
  const bool stopping = destroying || stopping_copies_.load(std::memory_order_relaxed);
  for (size_t i = 0; i < gated_.size();) {
    TransferJob& job = gated_[i].job;
    bool unreadable = false;
    const bool open = !stopping && GateOpen(*job.signal, &unreadable);
    Status why;
    if (stopping) {
      why = StoppingCutOff();
    } else if (unreadable) {
      why = Status::DeviceError(
          "the completion board could not be read (the engine shrank or unmapped it) before the "
          "store's gate was opened");
    } else if (!open) {
      why = job.signal->give_up();
      const std::shared_ptr<CopyFence>& fence = job.registration->fence;
      if (why.ok() && fence && fence->GivenUp(job.request_id)) why = GivenUpCutOff();
      if (why.ok()) {
        ++i;
        continue;
      }
    }
    gates_waiting_.fetch_sub(1, std::memory_order_relaxed);
    if (open) {
      ready.push_back(std::move(job));
    } else {
      // Never copied: what the engine's blocks hold is not known to be its
      // KV. The store's slots and chunks report why.
      Dequeue(job);
      CutOff(job, why);
    }
    gated_.erase(gated_.begin() + long(i));
  }
}

void TransferWorker::Lane::Dequeue(const TransferJob& job) {
  if (loads_ != nullptr) loads_->Remove(device_, direction_, job.queued_bytes);
}

void TransferWorker::Lane::HoldFences(std::vector<TransferJob>& jobs) {
  const bool stopping = stopping_copies_.load(std::memory_order_relaxed);
  size_t kept = 0;
  for (size_t i = 0; i < jobs.size(); ++i) {
    TransferJob& job = jobs[i];
    Status why;
    if (stopping) {
      why = StoppingCutOff();
    } else if (const std::shared_ptr<CopyFence>& fence = job.registration->fence) {
      Result<bool> held = fence->Hold(job.request_id);
      if (!held.ok()) {
        why = held.status();
      } else if (!*held) {
        why = GivenUpCutOff();
      }
    }
    if (!why.ok()) {
      Dequeue(job);
      CutOff(job, why);
      continue;
    }
    if (kept != i) jobs[kept] = std::move(job);
    ++kept;
  }
  jobs.resize(kept);
}

void TransferWorker::Lane::ReleaseOnFailure(const CopySignal& signal, const Status& status,
                                            const std::vector<uint8_t>& cut,
                                            const Status& cut_why) {
  const bool any_cut = std::find(cut.begin(), cut.end(), 1) != cut.end();
  if (status.ok() && !any_cut) return;  // the copy released every slot itself
  signal.ReleaseAll(status.ok() ? cut_why : status);
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
    deadlines.stopping = &stopping_copies_;
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
    // Copy returned: nothing of these jobs is written any more (GPU copies
    // drained), so an engine waiting to give them up may have them now.
    for (size_t j = begin; j < end; ++j) {
      if (jobs[j].registration->fence) jobs[j].registration->fence->Release(jobs[j].request_id);
    }
    if (trace_) {
      for (size_t j = begin; j < end; ++j) trace_->Mark(jobs[j].request_id, TraceStage::kCopyDone);
    }
    // Chunks left out inside Copy: the daemon stopping, else the deadline.
    const Status cut_why =
        stopping_copies_.load(std::memory_order_relaxed) ? StoppingCutOff() : DeadlineCutOff();
    if (signal != nullptr) ReleaseOnFailure(*signal, status, deadlines.missed, cut_why);
    size_t offset = 0;
    for (size_t j = begin; j < end; ++j) {
      const size_t n = jobs[j].chunks.size();
      const std::vector<uint8_t> missed(deadlines.missed.begin() + offset,
                                        deadlines.missed.begin() + offset + n);
      offset += n;
      Dequeue(jobs[j]);
      jobs[j].complete(status, missed, cut_why);
      jobs[j].registration->EndWork();
    }
    begin = end;
  }
}

}  // namespace kvstash::server
