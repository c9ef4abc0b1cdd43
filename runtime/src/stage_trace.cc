// Recording and writing per-request stage timestamps.
#include "kvstash/runtime/stage_trace.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>

namespace kvstash {

namespace {

constexpr size_t kCapacity = size_t(1) << 20;  // records: 24 MiB, ~100k requests

}  // namespace

const char* TraceStageName(TraceStage stage) {
  switch (stage) {
    case TraceStage::kClientSubmit: return "client_submit";
    case TraceStage::kClientSent: return "client_sent";
    case TraceStage::kDaemonReceived: return "daemon_received";
    case TraceStage::kDaemonHandled: return "daemon_handled";
    case TraceStage::kLanePickup: return "lane_pickup";
    case TraceStage::kCopyDone: return "copy_done";
    case TraceStage::kReplyPushed: return "reply_pushed";
    case TraceStage::kReplySent: return "reply_sent";
    case TraceStage::kClientReceived: return "client_received";
    case TraceStage::kClientDone: return "client_done";
    case TraceStage::kCallerWoke: return "caller_woke";
  }
  return "unknown";
}

std::unique_ptr<StageTrace> StageTrace::FromEnvironment(const std::string& role) {
  const char* prefix = std::getenv("KVSTASH_TRACE_FILE");
  if (prefix == nullptr || *prefix == '\0') return nullptr;
  return std::make_unique<StageTrace>(
      std::string(prefix) + "." + role + "." + std::to_string(::getpid()), kCapacity);
}

StageTrace::StageTrace(std::string path, size_t capacity)
    : path_(std::move(path)), records_(capacity) {}

StageTrace::~StageTrace() {
  std::FILE* file = std::fopen(path_.c_str(), "w");
  if (file == nullptr) return;  // tracing is a measurement aid: nothing to fail
  const size_t n = std::min(next_.load(), records_.size());
  for (size_t i = 0; i < n; ++i) {
    const Record& r = records_[i];
    std::fprintf(file, "%llu %s %lld\n", static_cast<unsigned long long>(r.request_id),
                 TraceStageName(r.stage), static_cast<long long>(r.ns));
  }
  std::fclose(file);
}

void StageTrace::Mark(uint64_t request_id, TraceStage stage, Clock::time_point at) {
  const size_t i = next_.fetch_add(1, std::memory_order_relaxed);
  if (i >= records_.size()) return;
  records_[i] = Record{
      request_id,
      std::chrono::duration_cast<std::chrono::nanoseconds>(at.time_since_epoch()).count(), stage};
}

}  // namespace kvstash
