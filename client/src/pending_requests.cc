// Bookkeeping of pending requests.
#include "pending_requests.h"

namespace kvstash::client {

void PendingRequests::Add(ClientRequest request) {
  by_deadline_.emplace(request.deadline, request.id);
  const uint64_t id = request.id;
  by_id_.emplace(id, std::move(request));
}

ClientRequest* PendingRequests::Find(uint64_t id) {
  auto it = by_id_.find(id);
  return it == by_id_.end() ? nullptr : &it->second;
}

std::optional<ClientRequest> PendingRequests::Take(uint64_t id) {
  auto it = by_id_.find(id);
  if (it == by_id_.end()) return std::nullopt;
  ClientRequest request = std::move(it->second);
  by_id_.erase(it);
  by_deadline_.erase({request.deadline, id});
  return request;
}

std::vector<ClientRequest> PendingRequests::TakeExpired(Clock::time_point now) {
  std::vector<ClientRequest> expired;
  while (!by_deadline_.empty() && by_deadline_.begin()->first <= now) {
    const uint64_t id = by_deadline_.begin()->second;
    expired.push_back(*Take(id));
  }
  return expired;
}

std::vector<ClientRequest> PendingRequests::TakeSent() {
  std::vector<uint64_t> ids;
  for (const auto& [id, request] : by_id_) {
    if (request.sent) ids.push_back(id);
  }
  std::vector<ClientRequest> sent;
  for (uint64_t id : ids) sent.push_back(*Take(id));
  return sent;
}

std::vector<ClientRequest> PendingRequests::TakeSentThroughRing() {
  std::vector<uint64_t> ids;
  for (const auto& [id, request] : by_id_) {
    if (request.sent && request.via_ring) ids.push_back(id);
  }
  std::vector<ClientRequest> sent;
  for (uint64_t id : ids) sent.push_back(*Take(id));
  return sent;
}

std::vector<ClientRequest> PendingRequests::TakeAll() {
  std::vector<ClientRequest> all;
  for (auto& [id, request] : by_id_) all.push_back(std::move(request));
  by_id_.clear();
  by_deadline_.clear();
  return all;
}

std::optional<Clock::time_point> PendingRequests::NextDeadline() const {
  if (by_deadline_.empty()) return std::nullopt;
  return by_deadline_.begin()->first;
}

}  // namespace kvstash::client
