// The requests the I/O thread is responsible for, sent or not yet sent, by
// id and by deadline.
#pragma once

#include <cstdint>
#include <optional>
#include <set>
#include <unordered_map>
#include <utility>
#include <vector>

#include "client_request.h"

namespace kvstash::client {

// Owned and used by the I/O thread only.
class PendingRequests {
 public:
  void Add(ClientRequest request);
  ClientRequest* Find(uint64_t id);
  std::optional<ClientRequest> Take(uint64_t id);
  // Requests whose deadline is not after `now`, earliest first.
  std::vector<ClientRequest> TakeExpired(Clock::time_point now);
  // Requests already handed to the socket (a lost connection loses them).
  std::vector<ClientRequest> TakeSent();
  // Requests sent through the shared-memory channel (which kvstashd closed).
  std::vector<ClientRequest> TakeSentThroughRing();
  std::vector<ClientRequest> TakeAll();
  std::optional<Clock::time_point> NextDeadline() const;
  size_t size() const { return by_id_.size(); }

 private:
  std::unordered_map<uint64_t, ClientRequest> by_id_;
  std::set<std::pair<Clock::time_point, uint64_t>> by_deadline_;
};

}  // namespace kvstash::client
