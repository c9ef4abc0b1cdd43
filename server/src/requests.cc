// Replies answered later and the per-client count of them.
#include "requests.h"

#include <string>

namespace kvstash::server {

void DeferredReplies::RecordLatency(const Request& request) {
  const auto micros =
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - request.start).count();
  stats_.latency(request.kind).Record(uint64_t(micros));
}

void DeferredReplies::Finish(const Request& request, const ReplyBody& reply) {
  // Encoded first: running out of memory here leaves nothing counted.
  proto::Bytes bytes = EncodeReply(request.id, reply);
  RecordLatency(request);
  End(request.peer.id);
  MarkStage(trace_, request.id, TraceStage::kReplyPushed);
  replies_.Push(request.peer.id, std::move(bytes), request.id);
  deferred_.fetch_sub(1);
}

void DeferredReplies::Fail(const Request& request, const Status& status) {
  Stats::Add(stats_.request_errors);
  RecordLatency(request);
  End(request.peer.id);
  MarkStage(trace_, request.id, TraceStage::kReplyPushed);
  replies_.Push(request.peer.id, proto::ErrorMessage(request.id, status), request.id);
  deferred_.fetch_sub(1);
}

Status DeferredReplies::CheckInFlight(const PeerId& peer) {
  MutexLock lock(in_flight_mutex_);
  auto found = in_flight_.find(peer);
  if (found == in_flight_.end() || found->second < config_.max_in_flight_per_client) {
    return Status::Ok();
  }
  Stats::Add(stats_.requests_refused_busy);
  return Status::Exhausted("this client has " + std::to_string(found->second) +
                           " requests awaiting their reply; the limit is " +
                           std::to_string(config_.max_in_flight_per_client) +
                           " (--max-in-flight-per-client)");
}

void DeferredReplies::Begin(const PeerId& peer) {
  MutexLock lock(in_flight_mutex_);
  ++in_flight_[peer];
  deferred_.fetch_add(1);
}

void DeferredReplies::End(const PeerId& peer) {
  MutexLock lock(in_flight_mutex_);
  auto found = in_flight_.find(peer);
  if (found != in_flight_.end() && --found->second == 0) in_flight_.erase(found);
}

}  // namespace kvstash::server
