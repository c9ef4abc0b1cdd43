// Each tier against its raw limit, in the same run (`kvstash bench tiers`
// and bench/tiers/kvstash_tier_bench):
//   L2  DiskTier puts/gets of N chunks  vs  raw O_DIRECT sequential writes
//       and reads of the same bytes in one file on the same disk (pwrite at
//       queue depth 1 and io_uring at the tier's total depth: the better one is
//       the limit). Each run measures raw then tier back to back; a shared
//       disk drifts between runs, so ratios are taken within a run and the
//       median run's is reported.
//   L3  RedisTier puts/gets of values  vs  raw pipelined SET/GET of the same
//       value size on the same server, with as many connections as the tier
//       has threads.
// Every byte the tiers return is compared with what was written.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::bench {

struct DiskLimitConfig {
  std::string dir;  // on the disk to measure; a scratch folder is made inside
  uint64_t chunk_bytes = 8ull << 20;
  uint32_t chunks = 128;
  uint32_t rings = 2;         // io_uring rings of the tier (the daemon's default)
  uint32_t depth = 8;         // chunks in flight per ring; raw: rings x depth
  uint32_t pool_threads = 4;  // the thread-pool tier (the fallback), 0: not measured
  uint32_t runs = 3;
};

struct DiskRun {
  double w_sync = 0, r_sync = 0, w_uring = 0, r_uring = 0;  // raw, GB/s
  double tier_w = 0, tier_r = 0;                            // DiskTier on io_uring
  double pool_w = 0, pool_r = 0;                            // DiskTier on its thread pool
  double raw_w() const { return w_sync > w_uring ? w_sync : w_uring; }
  double raw_r() const { return r_sync > r_uring ? r_sync : r_uring; }
};

struct DiskLimits {
  DiskLimitConfig config;
  std::vector<DiskRun> runs;
  double write_ratio = 0, read_ratio = 0;            // medians, io_uring tier
  double pool_write_ratio = 0, pool_read_ratio = 0;  // medians, thread pool
};

Result<DiskLimits> MeasureDiskLimits(const DiskLimitConfig& config);
std::string DiskLimitsText(const DiskLimits& limits);

struct RedisLimitConfig {
  std::string endpoint;  // HOST:PORT of one server (a cluster node answers for its slots only)
  std::string user, password;
  uint64_t value_bytes = 32ull << 20;
  uint32_t values = 32;
  uint32_t connections = 4;  // raw connections = tier I/O threads
  uint32_t runs = 3;
};

struct RedisRun {
  double raw_set = 0, raw_get = 0, tier_put = 0, tier_get = 0;  // GB/s
};

struct RedisLimits {
  RedisLimitConfig config;
  std::vector<RedisRun> runs;
  double put_ratio = 0, get_ratio = 0;  // medians
};

Result<RedisLimits> MeasureRedisLimits(const RedisLimitConfig& config);
std::string RedisLimitsText(const RedisLimits& limits);

}  // namespace kvstash::bench
