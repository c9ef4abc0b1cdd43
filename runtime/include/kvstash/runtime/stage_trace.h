// Per-request stage timestamps, to see where one request's time goes across
// the engine's thread, libkvstash's I/O thread, kvstashd's frontend and its
// copy lanes (bench/probes/trace_stages.py and stage_join.py join them).
//
// Off unless the environment names a file: KVSTASH_TRACE_FILE=<prefix> makes
// every process that reads it (kvstashd, a Client) record into memory and
// write "<request id> <stage> <CLOCK_MONOTONIC ns>" lines to
// <prefix>.<role>.<pid> when the owner is destroyed. The clock is shared by
// every process of the host, so the files of a client and of kvstashd line
// up. Recording is one relaxed atomic add and a store; a full buffer stops
// recording (it never grows, so a long-running daemon does not leak).
// Thread-safe: Mark from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace kvstash {

enum class TraceStage : uint8_t {
  kClientSubmit,    // the engine's thread queued the request
  kClientSent,      // the I/O thread hands it to ZeroMQ (marked just before; first try)
  kDaemonReceived,  // the frontend took it off the socket
  kDaemonHandled,   // the frontend answered it inline, or is about to queue its copy
  kLanePickup,      // a copy lane took its job
  kCopyDone,        // the backend's copy returned
  kReplyPushed,     // the lane put the reply on the reply queue
  kReplySent,       // the frontend hands the reply to ZeroMQ (marked just before)
  kClientReceived,  // the I/O thread read the reply
  kClientDone,      // the I/O thread begins completing it (decode, set the future)
  kCallerWoke,      // the engine's thread got the outcome (recorded by probes)
};

// "client_submit" etc.: the names the trace files use.
const char* TraceStageName(TraceStage stage);

class StageTrace {
 public:
  using Clock = std::chrono::steady_clock;

  // Null unless KVSTASH_TRACE_FILE is set; `role` names the file ("daemon").
  static std::unique_ptr<StageTrace> FromEnvironment(const std::string& role);
  StageTrace(std::string path, size_t capacity);
  ~StageTrace();  // writes the file
  StageTrace(const StageTrace&) = delete;
  StageTrace& operator=(const StageTrace&) = delete;

  void Mark(uint64_t request_id, TraceStage stage, Clock::time_point at = Clock::now());
  const std::string& path() const { return path_; }

 private:
  struct Record {
    uint64_t request_id;
    int64_t ns;
    TraceStage stage;
  };
  const std::string path_;
  std::vector<Record> records_;
  std::atomic<size_t> next_{0};
};

// Marks only when tracing is on: the hot path pays one branch otherwise.
inline void MarkStage(StageTrace* trace, uint64_t request_id, TraceStage stage) {
  if (trace != nullptr) trace->Mark(request_id, stage);
}

}  // namespace kvstash
