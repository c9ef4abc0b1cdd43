// A circuit breaker per remote server: closed (calls pass) until
// `failures` calls in a row fail, then open (calls refused at once) for
// `open_ms`, then half-open: one call passes, and its outcome closes or
// reopens the breaker. A dead or hung server then costs one timeout per
// `open_ms`, not one per call. Thread-safe.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <mutex>
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::tiers::internal {

class CircuitBreaker {
 public:
  using Clock = std::chrono::steady_clock;
  CircuitBreaker(uint32_t failures, std::chrono::milliseconds open_for)
      : threshold_(failures == 0 ? 1 : failures), open_for_(open_for) {}

  // Whether a call may go ahead now. In half-open state only one caller at
  // a time is let through.
  bool Allow(Clock::time_point now = Clock::now()) {
    MutexLock lock(mutex_);
    if (state_ == State::kClosed) return true;
    if (state_ == State::kOpen && now >= reopen_at_) {
      state_ = State::kHalfOpen;
      trial_in_flight_ = false;
    }
    if (state_ == State::kHalfOpen && !trial_in_flight_) {
      trial_in_flight_ = true;
      return true;
    }
    return false;
  }
  void Success() {
    MutexLock lock(mutex_);
    state_ = State::kClosed;
    failures_ = 0;
    trial_in_flight_ = false;
  }
  // Returns true when this failure opened the breaker.
  bool Failure(Clock::time_point now = Clock::now()) {
    MutexLock lock(mutex_);
    ++failures_;
    trial_in_flight_ = false;
    if (state_ == State::kHalfOpen || (state_ == State::kClosed && failures_ >= threshold_)) {
      const bool opened = state_ == State::kClosed;
      state_ = State::kOpen;
      reopen_at_ = now + open_for_;
      return opened;
    }
    return false;
  }
  // Milliseconds until a trial call is let through; 0 when closed.
  int64_t RetryInMs(Clock::time_point now = Clock::now()) const {
    MutexLock lock(mutex_);
    if (state_ != State::kOpen) return 0;
    return std::max<int64_t>(
        0, std::chrono::duration_cast<std::chrono::milliseconds>(reopen_at_ - now).count());
  }
  uint32_t consecutive_failures() const {
    MutexLock lock(mutex_);
    return failures_;
  }

 private:
  enum class State { kClosed, kOpen, kHalfOpen };
  const uint32_t threshold_;
  const std::chrono::milliseconds open_for_;
  mutable Mutex mutex_;
  State state_ KVSTASH_GUARDED_BY(mutex_) = State::kClosed;
  uint32_t failures_ KVSTASH_GUARDED_BY(mutex_) = 0;
  bool trial_in_flight_ KVSTASH_GUARDED_BY(mutex_) = false;
  Clock::time_point reopen_at_ KVSTASH_GUARDED_BY(mutex_){};
};

}  // namespace kvstash::tiers::internal
