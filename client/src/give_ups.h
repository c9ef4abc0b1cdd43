// Requests given up while kvstashd may still be copying them (a sent Store
// or Retrieve): each is reported failed only once kvstashd can copy none of
// it any more (docs/protocol.md "The copy fence"): once its GiveUpFence byte
// is ours and kvstashd's process lets it (ProcessAllowsReport), or, without
// a fence, once its deadline passed. The others are reported at once.
//
// Owned by the IoLoop; I/O thread only.
#pragma once

#include <chrono>
#include <functional>
#include <vector>

#include "client_request.h"

namespace kvstash::client {

class GiveUps {
 public:
  // Completes a request with its failure (IoLoop::Complete).
  using Report = std::function<void(ClientRequest& request, Status why)>;
  explicit GiveUps(Report report) : report_(std::move(report)) {}

  // How often a request that waits tries its fence again while kvstashd
  // still copies it (at most the rest of one copy call).
  static constexpr std::chrono::milliseconds kRetry{1};

  // Reports `request` failed with `why`, now or once it may be. `goodbye`:
  // kvstashd said Goodbye, which it does only once its copies have stopped,
  // so an unfenced request may fail at once then too.
  void GiveUp(ClientRequest request, Status why, bool goodbye);
  // Reports those that may be reported now.
  void Retry();
  bool empty() const { return waiting_.empty(); }
  // The loop ends: waits for the fences, until each request's deadline at
  // most (the engine is tearing its client down), and reports them all.
  void Finish();

 private:
  // Reports it if it may be now; false: it still waits.
  bool TryGiveUp(ClientRequest& request);
  // With the request's fence byte ours: whether kvstashd's process lets its
  // failure be reported now.
  static bool ProcessAllowsReport(const ClientRequest& request, Clock::time_point now);

  Report report_;
  std::vector<ClientRequest> waiting_;
};

}  // namespace kvstash::client
