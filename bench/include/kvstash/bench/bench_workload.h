// `kvstash bench`: a synthetic engine that registers paged KV memory, stores
// prompts that share a prefix, then looks each one up and retrieves it into
// other (poisoned) blocks and checks every byte.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/bench/bench_kv.h"
#include "kvstash/client.h"

namespace kvstash::bench {

struct BenchConfig {
  std::string backend = "host";
  std::string model = "kvstash-bench";
  KvShape shape;  // num_blocks 0: twice the blocks of one prompt
  uint32_t prompts = 8;
  uint32_t prompt_tokens = 1024;
  uint32_t shared_prefix_tokens = 512;
  uint32_t rounds = 1;
  uint32_t seed = 1;  // different seeds make different prompts
  bool verify = true;
  // "both": store then retrieve each round. "store": only store. "retrieve":
  // only look up and retrieve what an earlier "store" run with the same
  // seed and shape stored, maybe on another daemon sharing its L3, or on
  // this one before a restart: every chunk must be found and every byte
  // must match.
  std::string phase = "both";
};

struct BenchResults {
  // Workload as run.
  uint32_t chunk_tokens = 0;
  uint64_t chunk_bytes = 0;
  uint32_t num_blocks = 0;
  uint64_t token_bytes = 0;  // one token across every layer, K and V
  // Store.
  uint64_t chunks_stored = 0;
  uint64_t chunks_already_present = 0;
  uint64_t chunks_skipped_no_room = 0;
  uint64_t chunks_store_failed = 0;
  uint64_t bytes_stored = 0;
  double store_seconds = 0;
  // Lookup and retrieve.
  uint64_t lookup_chunks = 0;  // keys asked
  uint64_t hit_chunks = 0;
  uint64_t lookup_tokens = 0;
  uint64_t hit_tokens = 0;
  uint64_t chunks_retrieved = 0;
  uint64_t chunks_missing = 0;
  uint64_t chunks_retrieve_failed = 0;
  uint64_t bytes_retrieved = 0;
  double retrieve_seconds = 0;
  std::vector<double> lookup_ms;
  std::vector<double> retrieve_ms;
  // The daemon's counters over the run (daemon-wide: other clients' traffic
  // counts too), to explain a hit rate below 100%.
  bool daemon_counters_read = false;
  uint64_t daemon_evicted_chunks = 0;
  uint64_t daemon_cleared_chunks = 0;
  uint64_t daemon_leases_expired = 0;
  // Verification.
  bool verified = false;
  uint64_t tokens_verified = 0;
  Mismatches mismatches;
  std::vector<std::string> errors;  // per-chunk failures, first few
  // --phase retrieve: a chunk not found (a short hit or a missing retrieve)
  // fails the run, since the store phase stored all of them.
  bool every_chunk_expected = false;

  bool every_chunk_found() const { return hit_chunks == lookup_chunks && chunks_missing == 0; }
  bool passed() const {
    return mismatches.rows == 0 && chunks_store_failed == 0 && chunks_retrieve_failed == 0 &&
           errors.empty() && (!every_chunk_expected || every_chunk_found());
  }
};

// Why fewer chunks were found than asked for, in words ("" at 100%): the
// pool was full and chunks were evicted, stores were skipped, cleared...
std::string HitShortfallReason(const BenchResults& results);

// Runs the workload; an error Status means it could not run at all (a
// request failed), while data mismatches are reported in the results.
Result<BenchResults> RunBench(Client& client, const BenchConfig& config);

}  // namespace kvstash::bench
