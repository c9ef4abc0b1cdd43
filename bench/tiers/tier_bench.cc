// kvstash_tier_bench: each tier against its raw limit, in the same run, on
// the same disk and the same Redis (targets: L2 0.9 of raw, L3 0.8, an
// index of 64 GiB rebuilt in 5 s). The L2 and L3
// measurements are kvstash::tier_bench_core's (kvstash/bench/
// tier_limits.h), which `kvstash bench tiers` runs too; this one adds
//   Index rebuild: DiskTier::Open over --index-chunks chunk files (sparse
//       payloads of --index-chunk-mb: the rebuild reads headers only), warm
//       and with their pages dropped from the cache first,
// and starts a private redis-server when no --redis is named.
// Prints GB/s (10^9 bytes per second) and ratios. Not a test.
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <thread>
#include <tuple>
#include <utility>
#include <vector>

#include "kvstash/bench/tier_limits.h"
#include "kvstash/tiers/disk_tier.h"
#include "kvstash/tiers/redis_tier.h"

namespace kvstash::tiers {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBlock = 4096;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

ChunkId Id(uint64_t i) {
  ChunkId id;
  std::mt19937_64 random(i * 7919 + 1);
  for (size_t k = 0; k < 32; k += 8) {
    const uint64_t a = random(), b = random();
    std::memcpy(id.key.data() + k, &a, 8);
    std::memcpy(id.scope.data() + k, &b, 8);
  }
  id.scope[0] = 0x5c;  // one scope for all
  std::memset(id.scope.data() + 1, 0x5c, 31);
  return id;
}

void Die(const std::string& what) {
  std::fprintf(stderr, "kvstash_tier_bench: %s\n", what.c_str());
  std::exit(1);
}

// Drops a file's pages from the page cache, so the next read goes to disk.
void Uncache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

// ---------------------------------------------------------------- index

void BenchIndex(const std::string& dir, uint32_t chunks, uint64_t chunk) {
  std::printf(
      "\n== L2 index rebuild: %u chunk files of %.1f MiB (%.1f GiB of L2, payloads sparse)\n",
      chunks, double(chunk) / kMiB, double(chunks) * chunk / (1ull << 30));
  const std::string tier_dir = dir + "/index";
  {
    // Files in the tier's own format: put one small real chunk to create
    // the layout, then write headers of large sparse chunks beside it.
    DiskTierOptions options;
    options.path = tier_dir;
    options.capacity_bytes = uint64_t{chunks} * (chunk + 2 * kBlock) + (1ull << 30);
    auto tier = DiskTier::Open(options);
    if (!tier.ok()) Die(tier.status().ToString());
    const auto start = Clock::now();
    uint8_t block[kBlock] = {};
    for (uint32_t i = 0; i < chunks; ++i) {
      ChunkHeader h;
      h.id = Id(1000000 + i);
      h.num_tokens = 256;
      h.payload_bytes = chunk;
      EncodeChunkHeader(h, block);
      const std::string path = (*tier)->PathOf(h.id);
      const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
      if (fd < 0 || ::pwrite(fd, block, kBlock, 0) != static_cast<ssize_t>(kBlock) ||
          ::ftruncate(fd, static_cast<off_t>(kBlock + chunk)) != 0) {
        Die("cannot create " + path);
      }
      ::close(fd);
    }
    std::printf("created in %.1f s\n", Seconds(start));
  }
  ::sync();
  for (int warm = 1; warm >= 0; --warm) {
    if (!warm) {
      // Cold: drop the files' pages (their directory entries stay cached).
      for (uint32_t i = 0; i < chunks; ++i) {
        ChunkId id = Id(1000000 + i);
        const std::string key = ToHex(id.key);
        Uncache(tier_dir + "/" + key.substr(0, 2) + "/" + ToHex(id.scope.data(), 32) + "-" + key +
                ".kvc");
      }
    }
    DiskTierOptions options;
    options.path = tier_dir;
    options.capacity_bytes = uint64_t{chunks} * (chunk + 2 * kBlock) + (1ull << 30);
    const auto start = Clock::now();
    auto tier = DiskTier::Open(options);
    const double s = Seconds(start);
    if (!tier.ok()) Die(tier.status().ToString());
    std::printf("rebuild (%s page cache): %llu chunks, %.1f GiB indexed in %.3f s (%.0f files/s)\n",
                warm ? "warm" : "cold",
                static_cast<unsigned long long>((*tier)->rebuild_report().chunks),
                (*tier)->rebuild_report().bytes / double(1ull << 30), s, chunks / s);
  }
  std::system(("rm -rf '" + tier_dir + "'").c_str());
}

// ---------------------------------------------------------------- L3

// Starts a private redis-server when none was named; killed at exit.
pid_t StartRedis(int port) {
  const pid_t pid = ::fork();
  if (pid == 0) {
    const std::string p = std::to_string(port);
    ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save",
             "", "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning", nullptr);
    ::_exit(127);
  }
  for (int i = 0; i < 200; ++i) {
    redisContext* c = redisConnect("127.0.0.1", port);
    if (c && !c->err) {
      redisFree(c);
      return pid;
    }
    if (c) redisFree(c);
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  Die("redis-server did not start");
  return -1;
}

}  // namespace
}  // namespace kvstash::tiers

int main(int argc, char** argv) {
  using namespace kvstash::tiers;
  CLI::App app("kvstash_tier_bench: L2 and L3 against their raw limits", "kvstash_tier_bench");
  std::string dir = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  double chunk_mb = 8, value_mb = 32, index_chunk_mb = 1;
  uint32_t count = 128, threads = 4, depth = 8, values = 32, index_chunks = 65536, repeats = 3;
  std::string redis, only;
  app.add_option("--dir", dir,
                 "Directory on the disk to measure (a scratch folder is made inside)");
  app.add_option("--chunk-mb", chunk_mb, "L2 chunk size in MiB");
  app.add_option("--chunks", count, "L2 chunks written and read");
  app.add_option("--threads", threads,
                 "L2 thread-pool threads; L3 I/O threads and raw connections");
  app.add_option("--depth", depth,
                 "L2 io_uring chunks in flight per ring (2 rings; raw: 2 x depth)");
  app.add_option("--redis", redis,
                 "HOST:PORT of the Redis to measure; default: a private redis-server");
  app.add_option("--value-mb", value_mb, "L3 value size in MiB");
  app.add_option("--values", values, "L3 values written and read");
  app.add_option("--index-chunks", index_chunks, "chunk files for the index rebuild");
  app.add_option("--index-chunk-mb", index_chunk_mb, "their (sparse) payload size in MiB");
  app.add_option("--only", only, "l2, index or l3");
  app.add_option("--repeat", repeats,
                 "L2 and L3 runs, interleaved; the best of each figure is shown");
  CLI11_PARSE(app, argc, argv);

  char scratch[4096];
  std::snprintf(scratch, sizeof(scratch), "%s/kvstash-tier-bench-XXXXXX", dir.c_str());
  if (::mkdtemp(scratch) == nullptr) Die("cannot create a folder in " + dir);
  if (only.empty() || only == "l2") {
    kvstash::bench::DiskLimitConfig c;
    c.dir = scratch;
    c.chunk_bytes = uint64_t(chunk_mb * kMiB);
    c.chunks = count;
    c.depth = depth;
    c.pool_threads = threads;
    c.runs = repeats;
    auto limits = kvstash::bench::MeasureDiskLimits(c);
    if (!limits.ok()) Die(limits.status().ToString());
    std::printf("\n== %s", kvstash::bench::DiskLimitsText(*limits).c_str());
  }
  if (only.empty() || only == "index")
    BenchIndex(scratch, index_chunks, uint64_t(index_chunk_mb * kMiB));
  if (only.empty() || only == "l3") {
    pid_t own = -1;
    if (redis.empty()) {
      const int port = 20000 + static_cast<int>(::getpid() % 30000);
      own = StartRedis(port);
      redis = "127.0.0.1:" + std::to_string(port);
    }
    kvstash::bench::RedisLimitConfig c;
    c.endpoint = redis;
    c.value_bytes = uint64_t(value_mb * kMiB);
    c.values = values;
    c.connections = threads;
    c.runs = repeats;
    auto limits = kvstash::bench::MeasureRedisLimits(c);
    if (own > 0) {
      ::kill(own, SIGKILL);
      ::waitpid(own, nullptr, 0);
      own = -1;
    }
    if (!limits.ok()) Die(limits.status().ToString());
    std::printf("\n== %s", kvstash::bench::RedisLimitsText(*limits).c_str());
    if (own > 0) {
      ::kill(own, SIGKILL);
      ::waitpid(own, nullptr, 0);
    }
  }
  std::system(("rm -rf '" + std::string(scratch) + "'").c_str());
  return 0;
}
