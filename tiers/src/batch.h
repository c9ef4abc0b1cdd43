// One batch's results, filled by several threads; the last item to finish
// hands them all to the batch's callback. Internal to kvstash::tiers.
#pragma once

#include <atomic>
#include <functional>
#include <memory>
#include <utility>
#include <vector>

namespace kvstash::tiers::internal {

template <typename R>
class Batch {
 public:
  using Done = std::function<void(std::vector<R>)>;
  Batch(size_t size, Done done) : results_(size), remaining_(size), done_(std::move(done)) {}

  // Makes a batch shared by the items' jobs; an empty batch completes now.
  static std::shared_ptr<Batch> Make(size_t size, Done done) {
    auto batch = std::make_shared<Batch>(size, std::move(done));
    if (size == 0) batch->done_({});
    return batch;
  }

  // Records item i's result; the last one runs the callback.
  void Finish(size_t i, R result) {
    results_[i] = std::move(result);
    if (remaining_.fetch_sub(1, std::memory_order_acq_rel) == 1) done_(std::move(results_));
  }

 private:
  std::vector<R> results_;  // each slot written by one thread, read after the last
  std::atomic<size_t> remaining_;
  Done done_;
};

}  // namespace kvstash::tiers::internal
