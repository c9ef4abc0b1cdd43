// `kvstash bench --backend cuda`: how close kvstash comes to the hardware.
// In one run it measures raw pinned cudaMemcpy (device to host, host to
// device, both at once), then kvstash Store, Retrieve and both at once
// through the daemon (client -> ZeroMQ -> kvstashd -> GPU copies -> reply)
// for 1, 4, 16 and 64 chunks of a Llama-3-8B layout and of a small one, the
// p50/p99 latency of a 1-chunk retrieve and of a 64-key lookup against a raw
// ZeroMQ round trip, and the GPU memory the daemon holds. The engine side
// is this process: its KV lives in cudaMalloc memory, registered through
// kvstash/cuda_memory.h, on the daemon's GPU. With multi-path copies on in
// the daemon, each store's and retrieve's GB/s is also set against one PCIe
// link's (the raw D2H or H2D copy of the same bytes), with the share of
// bytes that NVLink peers carried.
//
// With --in-step-at, it measures instead one layout and chunk count in
// step with other bench processes (one per GPU, say): it stores and warms
// up, waits until the given wall-clock instant, retrieves back to back for a
// fixed time, copies the same bytes raw host to device as long, then stores
// fresh chunks back to back and copies raw device to host, each phase from
// an instant every process computes alike, and reports each phase's bytes
// and wall-clock interval, from which a script sums every process's GB/s
// over the time they overlapped (scripts/gpu_multipath.sh).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "kvstash/client.h"

namespace kvstash::bench {

struct CudaBenchConfig {
  std::vector<uint32_t> chunk_counts = {1, 4, 16, 64};
  int latency_samples = 1000;
  std::vector<std::string> layouts;  // names of CudaBenchLayouts() to measure; empty: all
  bool engine_visible = true;        // GPU-side completion rows (and the in-process baseline)
  // In step with other processes: the Unix time in milliseconds at which
  // the first phase (retrieves) starts (0: the full bench instead), and
  // how long each phase lasts.
  int64_t in_step_at_unix_ms = 0;
  double in_step_seconds = 3;
};

struct ThroughputRow {
  std::string layout;
  uint64_t chunk_bytes = 0;
  std::string op;  // store | retrieve | concurrent
  uint32_t chunks = 0;
  uint64_t bytes = 0;      // moved, both directions counted for concurrent
  double seconds = 0;      // median of the kvstash requests
  double raw_seconds = 0;  // median of the same bytes by plain cudaMemcpyAsync
  // Each kvstash request is paired with the raw copy timed right after it:
  // the median of the pairs' ratios (raw seconds / kvstash seconds) and
  // their 10th and 90th percentiles, the spread of the measurement.
  double ratio_median = 0;
  double ratio_p10 = 0;
  double ratio_p90 = 0;
  int samples = 0;
  double target = 0;  // ratio to reach
  double gbps() const { return seconds > 0 ? double(bytes) / seconds / 1e9 : 0; }
  double raw_gbps() const { return raw_seconds > 0 ? double(bytes) / raw_seconds / 1e9 : 0; }
  double ratio() const { return ratio_median; }
};

struct LatencyRow {
  std::string name;
  double p50_us = 0;
  double p99_us = 0;
  std::string reference;  // what the ratio divides by
  double reference_us = 0;
  double target = 0;          // the highest ratio allowed; 0: none
  double daemon_mean_us = 0;  // inside kvstashd, receive to reply (0: not measured)
  double ratio() const { return reference_us > 0 ? p50_us / reference_us : 0; }
};

// A store or retrieve of n chunks with multi-path copies on (kvstashd
// --multipath on): its GB/s against one PCIe link's (the raw D2H or H2D copy
// of the same bytes), and the share of the bytes the NVLink peers carried.
struct MultipathRow {
  std::string layout;
  std::string op;  // "store" or "retrieve"

  uint64_t chunk_bytes = 0;
  uint32_t chunks = 0;
  double gbps = 0;
  double one_link_gbps = 0;
  double ratio = 0;        // median of the pairs' ratios (gbps / one_link_gbps)
  double relay_share = 0;  // bytes the relays carried / bytes copied
  double target = 0;       // 0: none for this size or GPU count
};

// One phase of a run in step with other processes: requests back to back
// from a wall-clock instant for a fixed time.
struct InStepPhase {
  std::string op;  // "retrieve" (kvstash) or "raw H2D copy" (the same bytes each)
  std::string layout;
  uint64_t chunk_bytes = 0;
  uint32_t chunks = 0;
  uint32_t requests = 0;
  uint64_t bytes = 0;
  // Wall clock (Unix ns): the first request's start, the last one's end.
  int64_t start_unix_ns = 0;
  int64_t end_unix_ns = 0;
  int64_t late_ns = 0;       // start - the instant asked for
  uint64_t relay_bytes = 0;  // carried by the daemon's NVLink peers meanwhile (for every GPU)
  double gbps() const {
    return end_unix_ns > start_unix_ns ? double(bytes) / double(end_unix_ns - start_unix_ns) : 0;
  }
};

struct CudaBenchResults {
  std::string gpu;
  std::string transfer_mode;
  // kvstashd's multi-path state (describe's backend.multipath.state) and
  // the GPUs that can carry stores and retrieves (1: one path).
  std::string multipath_state;
  uint32_t multipath_paths = 1;
  std::vector<MultipathRow> multipath;
  bool in_step_run = false;  // --in-step-at: in_step alone
  std::vector<InStepPhase> in_step;
  uint32_t chunk_tokens = 0;
  std::vector<ThroughputRow> throughput;
  std::vector<LatencyRow> latency;
  uint64_t daemon_gpu_memory_bytes = 0;  // staging the daemon allocated
  uint64_t daemon_plan_bytes = 0;        // plan arenas on the GPU (as much pinned)
  std::vector<std::string> short_of_targets;
  std::vector<std::string> errors;  // requests whose chunks did not all succeed
  bool passed() const { return short_of_targets.empty() && errors.empty(); }
};

Result<CudaBenchResults> RunCudaBench(Client& client, const CudaBenchConfig& config);

std::string CudaBenchText(const CudaBenchResults& results);
nlohmann::ordered_json CudaBenchJson(const CudaBenchResults& results);

}  // namespace kvstash::bench
