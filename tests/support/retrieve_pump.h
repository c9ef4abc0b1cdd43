// An engine that keeps one retrieve in flight per region of its blocks and,
// on every report (reply or failure), reuses the region's blocks at once, as
// a real engine may: the copy fence tests (docs/protocol.md "The copy
// fence") then look for KV written into reused blocks, which kvstashd wrote
// after the report. Thread-safe; the reports run on the client's I/O thread.
#pragma once

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

#include "kvstash/client.h"

namespace kvstash::testing {

class RetrievePump {
 public:
  using Clock = std::chrono::steady_clock;
  // chunks(r): the chunks to retrieve into region r; reuse(r): overwrite
  // region r's blocks (runs before anything else learns of the report).
  RetrievePump(Client& client, uint64_t registration_id, uint32_t regions,
               std::function<std::vector<ChunkBlocks>(uint32_t)> chunks,
               std::function<void(uint32_t)> reuse)
      : client_(client),
        registration_id_(registration_id),
        busy_(regions, false),
        chunks_(std::move(chunks)),
        reuse_(std::move(reuse)) {}
  ~RetrievePump() { Stop(); }

  void Start() {
    thread_ = std::thread([this] { Run(); });
  }
  // Sends no more retrieves: a region reported from now on stays reused,
  // so that a late write into it is found.
  void StopSending() {
    {
      std::lock_guard<std::mutex> guard(mutex_);
      stop_ = true;
    }
    changed_.notify_all();
  }
  // Stops sending and returns once every request sent was reported.
  void Stop() {
    StopSending();
    if (thread_.joinable()) thread_.join();
  }
  // From now on, a request failed (not replied to) while allowed() is false
  // is counted in failed_too_early.
  void CheckFailures(std::function<bool()> allowed) {
    std::lock_guard<std::mutex> guard(mutex_);
    failure_allowed_ = std::move(allowed);
  }
  // Waits until `n` retrieves were answered with every chunk retrieved.
  bool WaitForRetrieved(uint64_t n, std::chrono::seconds limit) {
    std::unique_lock<std::mutex> lock(mutex_);
    return changed_.wait_for(lock, limit, [&] { return retrieved_ >= n; });
  }

  // Waits until every region has a retrieve in flight again, so that the
  // daemon surely has copies queued when a test strikes.
  bool WaitForAllInFlight(std::chrono::seconds limit) {
    const auto until = Clock::now() + limit;
    while (Clock::now() < until) {
      {
        std::lock_guard<std::mutex> guard(mutex_);
        if (in_flight_ == busy_.size()) return true;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
  }

  struct Counts {
    uint64_t in_flight = 0;
    uint64_t retrieved = 0;         // replies with every chunk retrieved
    uint64_t failed_chunks = 0;     // replies with a chunk not retrieved
    uint64_t failed = 0;            // requests failed without a reply
    uint64_t failed_too_early = 0;  // of these, reported while CheckFailures said no
    Clock::time_point last_report;
    // Requests failed TimedOut: how long after they were sent, the longest.
    uint64_t timed_out = 0;
    Clock::duration longest_timed_out{0};
  };
  Counts counts() {
    std::lock_guard<std::mutex> guard(mutex_);
    return counts_locked();
  }

 private:
  Counts counts_locked() const {
    return Counts{in_flight_,        retrieved_,   failed_chunks_, failed_,
                  failed_too_early_, last_report_, timed_out_,     longest_timed_out_};
  }
  void Run() {
    std::unique_lock<std::mutex> lock(mutex_);
    while (!stop_) {
      for (uint32_t r = 0; r < busy_.size() && !stop_; ++r) {
        if (busy_[r]) continue;
        busy_[r] = true;
        ++in_flight_;
        lock.unlock();
        const Clock::time_point sent = Clock::now();
        client_.Retrieve(registration_id_, chunks_(r), 0, 0,
                         [this, r, sent](Result<std::vector<ChunkOutcome>> outcome) {
                           Report(r, sent, outcome);
                         });
        lock.lock();
      }
      changed_.wait_for(lock, std::chrono::milliseconds(5));
    }
    changed_.wait(lock, [this] { return in_flight_ == 0; });
  }
  void Report(uint32_t r, Clock::time_point sent,
              const Result<std::vector<ChunkOutcome>>& outcome) {
    if (!outcome.ok()) {
      std::lock_guard<std::mutex> guard(mutex_);
      failed_too_early_ += failure_allowed_ && !failure_allowed_();
    }
    reuse_(r);  // the blocks are the engine's from now on
    std::lock_guard<std::mutex> guard(mutex_);
    busy_[r] = false;
    --in_flight_;
    last_report_ = Clock::now();
    if (!outcome.ok() && outcome.status().code() == StatusCode::kTimedOut) {
      ++timed_out_;
      longest_timed_out_ = std::max(longest_timed_out_, last_report_ - sent);
    }
    if (outcome.ok()) {
      bool all = true;
      for (const ChunkOutcome& o : *outcome) all = all && o.result == ChunkResult::kRetrieved;
      ++(all ? retrieved_ : failed_chunks_);
    } else {
      ++failed_;
    }
    changed_.notify_all();
  }

  Client& client_;
  const uint64_t registration_id_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<bool> busy_;  // guarded by mutex_
  const std::function<std::vector<ChunkBlocks>(uint32_t)> chunks_;
  const std::function<void(uint32_t)> reuse_;
  bool stop_ = false;
  uint64_t in_flight_ = 0;
  uint64_t retrieved_ = 0;
  uint64_t failed_chunks_ = 0;
  uint64_t failed_ = 0;
  uint64_t failed_too_early_ = 0;
  std::function<bool()> failure_allowed_;
  Clock::time_point last_report_;
  uint64_t timed_out_ = 0;
  Clock::duration longest_timed_out_{0};
  std::thread thread_;
};

}  // namespace kvstash::testing
