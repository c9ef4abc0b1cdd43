// kvstash_tier_bench: each tier against its raw limit, in the same run, on
// the same disk and the same Redis (issue 11's targets):
//   L2  DiskTier puts/gets of N chunks  vs  raw O_DIRECT sequential writes
//       and reads of the same bytes in one file (pwrite at queue depth 1,
//       and io_uring at queue depth = the tier's threads: the better one is
//       the raw limit), plus the alternative the tier did not take: one file
//       per chunk written and read through io_uring.
//   L3  RedisTier puts/gets of values of --value-mb  vs  raw pipelined
//       SET/GET of the same values on the same server, with as many
//       connections as the tier has threads.
//   Index rebuild: DiskTier::Open over --index-chunks chunk files (sparse
//       payloads of --index-chunk-mb: the rebuild reads headers only), with
//       their pages dropped from the cache first.
// Prints GB/s (10^9 bytes per second) and ratios. Not a test.
#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <liburing.h>
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

#include "kvstash/tiers/disk_tier.h"
#include "kvstash/tiers/redis_tier.h"

namespace kvstash::tiers {
namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBlock = 4096;

double Seconds(Clock::time_point start) { return std::chrono::duration<double>(Clock::now() - start).count(); }
double Gbps(uint64_t bytes, double seconds) { return bytes / seconds / 1e9; }

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;
Buffer Aligned(uint64_t bytes) {
  return Buffer(static_cast<uint8_t*>(std::aligned_alloc(kBlock, (bytes + kBlock - 1) / kBlock * kBlock)));
}

void Fill(uint8_t* p, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 random(seed);
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = random();
    std::memcpy(p + i, &v, 8);
  }
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

// ---------------------------------------------------------------- raw disk

// Makes the raw file `total` bytes long, its blocks allocated: extending
// O_DIRECT writes serialize on the inode (ext4), which would understate
// the disk.
void Preallocate(const std::string& path, uint64_t total) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0640);
  if (fd < 0 || ::posix_fallocate(fd, 0, static_cast<off_t>(total)) != 0) Die("cannot preallocate " + path);
  ::fsync(fd);
  ::close(fd);
}

// Sequential O_DIRECT transfer of `total` bytes in `block`-byte pieces, one
// at a time (pwrite / pread).
double RawSync(const std::string& path, bool write, uint64_t block, uint64_t total, uint8_t* buffer) {
  const int fd = ::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT, 0640);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  const auto start = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    const ssize_t n = write ? ::pwrite(fd, buffer, block, static_cast<off_t>(off))
                            : ::pread(fd, buffer, block, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(block)) Die("raw transfer failed");
  }
  if (write) ::fdatasync(fd);
  const double s = Seconds(start);
  ::close(fd);
  return s;
}

// The same through io_uring with `depth` transfers in flight.
double RawUring(const std::string& path, bool write, uint64_t block, uint64_t total, uint32_t depth,
                const std::vector<uint8_t*>& buffers) {
  const int fd = ::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT, 0640);
  if (fd < 0) Die("open " + path + ": " + std::strerror(errno));
  io_uring ring;
  if (io_uring_queue_init(depth, &ring, 0) != 0) Die("io_uring_queue_init failed");
  const auto start = Clock::now();
  uint64_t next = 0, done = 0;
  uint32_t in_flight = 0;
  while (done < total) {
    while (in_flight < depth && next < total) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      uint8_t* buf = buffers[(next / block) % buffers.size()];
      if (write) io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(block), next);
      else io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(block), next);
      next += block;
      ++in_flight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0 || cqe->res != static_cast<int>(block)) Die("io_uring transfer failed");
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    done += block;
  }
  if (write) ::fdatasync(fd);
  const double s = Seconds(start);
  io_uring_queue_exit(&ring);
  ::close(fd);
  return s;
}

// ---------------------------------------------------------------- L2

struct DiskFigures {
  double w_sync = 0, r_sync = 0, w_uring = 0, r_uring = 0;  // raw
  double tier_w = 0, tier_r = 0;                            // DiskTier on io_uring
  double pool_w = 0, pool_r = 0;                            // DiskTier on its thread pool
  double raw_w() const { return std::max(w_sync, w_uring); }
  double raw_r() const { return std::max(r_sync, r_uring); }
};

// One DiskTier: every chunk a Put, all in one batch, then (pages dropped)
// every chunk a Get, verified. GB/s each way.
std::pair<double, double> MeasureTier(const std::string& dir, const DiskTierOptions& base, uint64_t chunk,
                                      uint32_t count, const std::vector<uint8_t*>& buffers) {
  const uint64_t total = chunk * count;
  std::pair<double, double> out;
  {
    DiskTierOptions options = base;
    options.path = dir;
    options.capacity_bytes = total * 2 + (64ull << 20);
    auto tier = DiskTier::Open(options);
    if (!tier.ok()) Die(tier.status().ToString());
    if (base.io_uring && std::string((*tier)->io_engine()) != "io_uring") {
      Die("io_uring was refused: " + (*tier)->io_uring_refused_reason());
    }
    std::vector<PutRequest> puts;
    for (uint32_t i = 0; i < count; ++i) puts.push_back({Id(i), {}, 256, buffers[i % buffers.size()], chunk});
    auto start = Clock::now();
    for (const PutResult& r : PutAsync(**tier, puts).get()) {
      if (r.outcome != PutOutcome::kStored) Die("L2 put failed: " + r.status.ToString());
    }
    out.first = Gbps(total, Seconds(start));
    for (uint32_t i = 0; i < count; ++i) Uncache((*tier)->PathOf(Id(i)));
    std::vector<Buffer> got;
    std::vector<GetRequest> gets;
    for (uint32_t i = 0; i < count; ++i) {
      got.push_back(Aligned(chunk));
      std::memset(got.back().get(), 0, chunk);  // faulted in, as L1's pinned slots are
      gets.push_back({{Id(i), {}, chunk}, got.back().get()});
    }
    start = Clock::now();
    for (const GetResult& r : GetAsync(**tier, gets).get()) {
      if (!r.status.ok()) Die("L2 get failed: " + r.status.ToString());
    }
    out.second = Gbps(total, Seconds(start));
    for (uint32_t i = 0; i < count; ++i) {
      if (std::memcmp(got[i].get(), buffers[i % buffers.size()], chunk) != 0) Die("L2 returned wrong bytes");
    }
  }
  std::system(("rm -rf '" + dir + "'").c_str());
  return out;
}

DiskFigures MeasureDisk(const std::string& dir, uint64_t chunk, uint32_t count, uint32_t threads,
                        uint32_t depth) {
  DiskFigures f;
  const uint64_t total = chunk * count;
  std::vector<Buffer> owned;
  std::vector<uint8_t*> buffers;
  for (uint32_t i = 0; i < std::max(threads, depth); ++i) {
    owned.push_back(Aligned(chunk + 2 * kBlock));
    Fill(owned.back().get(), chunk + 2 * kBlock, i + 1);
    buffers.push_back(owned.back().get());
  }
  const uint64_t block = (chunk + kBlock - 1) / kBlock * kBlock;
  const std::string raw = dir + "/raw.bin";
  Preallocate(raw, block * count);
  // Raw limit: the better of queue depth 1 and io_uring at the tier's depth,
  // over the same bytes in one preallocated file.
  const double w_sync = RawSync(raw, true, block, block * count, buffers[0]);
  Uncache(raw);
  const double r_sync = RawSync(raw, false, block, block * count, buffers[0]);
  // A fresh file again: overwriting blocks written a moment ago skips the
  // extent conversion a new file's blocks need (about 1.5x faster on this
  // class of disk), which no chunk write of the tier gets.
  ::unlink(raw.c_str());
  Preallocate(raw, block * count);
  const double w_uring = RawUring(raw, true, block, block * count, depth, buffers);
  Uncache(raw);
  const double r_uring = RawUring(raw, false, block, block * count, depth, buffers);
  ::unlink(raw.c_str());
  f.w_sync = Gbps(total, w_sync), f.r_sync = Gbps(total, r_sync);
  f.w_uring = Gbps(total, w_uring), f.r_uring = Gbps(total, r_uring);

  DiskTierOptions uring;
  uring.io_uring = true;
  uring.io_threads = 1;
  uring.io_depth = depth;
  std::tie(f.tier_w, f.tier_r) = MeasureTier(dir + "/l2", uring, chunk, count, buffers);
  // The alternative: the same tier on its thread pool (the fallback).
  DiskTierOptions pool;
  pool.io_uring = false;
  pool.io_threads = threads;
  std::tie(f.pool_w, f.pool_r) = MeasureTier(dir + "/l2-pool", pool, chunk, count, buffers);
  return f;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

void BenchDisk(const std::string& dir, uint64_t chunk, uint32_t count, uint32_t threads, uint32_t depth,
               uint32_t repeats) {
  std::printf("\n== L2 local disk: %u chunks of %.1f MiB (%.2f GB) in %s, io_uring depth %u / %u pool threads, "
              "%u runs\n",
              count, double(chunk) / kMiB, chunk * count / 1e9, dir.c_str(), depth, threads, repeats);
  // Each run measures raw and tier back to back on the same bytes; a
  // shared disk drifts between runs, so each ratio is taken within its run
  // and the median run's ratio is the one reported.
  std::vector<double> rw, rr, pw, pr;
  DiskFigures last;
  for (uint32_t r = 0; r < repeats; ++r) {
    const DiskFigures m = MeasureDisk(dir, chunk, count, threads, depth);
    rw.push_back(m.tier_w / m.raw_w()), rr.push_back(m.tier_r / m.raw_r());
    pw.push_back(m.pool_w / m.raw_w()), pr.push_back(m.pool_r / m.raw_r());
    std::printf("run %u: raw w %.3f r %.3f GB/s | io_uring tier w %.3f r %.3f (ratio %.2f %.2f) | "
                "thread pool w %.3f r %.3f (ratio %.2f %.2f)\n",
                r + 1, m.raw_w(), m.raw_r(), m.tier_w, m.tier_r, rw.back(), rr.back(), m.pool_w, m.pool_r,
                pw.back(), pr.back());
    last = m;
  }
  std::printf("raw O_DIRECT sequential (last run)  write %.3f GB/s (pwrite QD1) %.3f GB/s (io_uring QD%u)\n",
              last.w_sync, last.w_uring, depth);
  std::printf("                                     read %.3f GB/s (pread QD1)  %.3f GB/s (io_uring QD%u)\n",
              last.r_sync, last.r_uring, depth);
  std::printf("median ratio  L2 io_uring     write %.2f  read %.2f (verified, checksummed)\n", Median(rw),
              Median(rr));
  std::printf("median ratio  L2 thread pool  write %.2f  read %.2f\n", Median(pw), Median(pr));
}

// ---------------------------------------------------------------- index

void BenchIndex(const std::string& dir, uint32_t chunks, uint64_t chunk) {
  std::printf("\n== L2 index rebuild: %u chunk files of %.1f MiB (%.1f GiB of L2, payloads sparse)\n", chunks,
              double(chunk) / kMiB, double(chunks) * chunk / (1ull << 30));
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
        Uncache(tier_dir + "/" + key.substr(0, 2) + "/" + ToHex(id.scope.data(), 32) + "-" + key + ".kvc");
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
                warm ? "warm" : "cold", static_cast<unsigned long long>((*tier)->rebuild_report().chunks),
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
    ::execlp("redis-server", "redis-server", "--port", p.c_str(), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--protected-mode", "no", "--loglevel", "warning", nullptr);
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

// Raw: `threads` connections, each pipelining SET (or GET) of its share.
double RawRedis(const std::string& host, int port, bool set, uint64_t value, uint32_t count, uint32_t threads,
                const uint8_t* data) {
  std::atomic<bool> ok{true};
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      redisContext* c = redisConnect(host.c_str(), port);
      if (!c || c->err) {
        ok = false;
        return;
      }
      std::vector<std::string> keys;
      for (uint32_t i = t; i < count; i += threads) keys.push_back("rawbench:" + std::to_string(i));
      for (const std::string& k : keys) {
        if (set) {
          const char* argv[] = {"SET", k.c_str(), reinterpret_cast<const char*>(data)};
          const size_t lens[] = {3, k.size(), value};
          redisAppendCommandArgv(c, 3, argv, lens);
        } else {
          const char* argv[] = {"GET", k.c_str()};
          const size_t lens[] = {3, k.size()};
          redisAppendCommandArgv(c, 2, argv, lens);
        }
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        void* reply = nullptr;
        if (redisGetReply(c, &reply) != REDIS_OK) {
          ok = false;
          break;
        }
        const redisReply* r = static_cast<redisReply*>(reply);
        if (!set && (r->type != REDIS_REPLY_STRING || r->len != value)) ok = false;
        freeReplyObject(reply);
      }
      redisFree(c);
    });
  }
  for (std::thread& w : workers) w.join();
  if (!ok) Die("raw redis transfer failed");
  return Seconds(start);
}

struct RedisFigures {
  double raw_w = 0, raw_r = 0, tier_w = 0, tier_r = 0;
};

RedisFigures MeasureRedis(const std::string& endpoint, uint64_t value, uint32_t count, uint32_t threads) {
  const uint64_t total = value * count;
  const size_t colon = endpoint.rfind(':');
  const std::string host = endpoint.substr(0, colon);
  const int port = std::stoi(endpoint.substr(colon + 1));
  Buffer data = Aligned(value);
  Fill(data.get(), value, 42);
  const double raw_w = Gbps(total, RawRedis(host, port, true, value, count, threads, data.get()));
  const double raw_r = Gbps(total, RawRedis(host, port, false, value, count, threads, data.get()));
  {
    redisContext* c = redisConnect(host.c_str(), port);
    for (uint32_t i = 0; i < count; ++i) freeReplyObject(redisCommand(c, "DEL rawbench:%u", i));
    redisFree(c);
  }
  RedisTierOptions options;
  options.servers = {endpoint};
  options.io_threads = threads;
  options.command_timeout_ms = 30000;
  auto tier = RedisTier::Open(options);
  if (!tier.ok()) Die(tier.status().ToString());
  std::vector<PutRequest> puts;
  for (uint32_t i = 0; i < count; ++i) puts.push_back({Id(i), {}, 256, data.get(), value});
  auto start = Clock::now();
  for (const PutResult& r : PutAsync(**tier, puts).get()) {
    if (r.outcome != PutOutcome::kStored) Die("L3 put failed: " + r.status.ToString());
  }
  const double tier_w = Gbps(total, Seconds(start));
  std::vector<Buffer> out;
  std::vector<GetRequest> gets;
  for (uint32_t i = 0; i < count; ++i) {
    out.push_back(Aligned(value));
    gets.push_back({{Id(i), {}, value}, out.back().get()});
  }
  start = Clock::now();
  for (const GetResult& r : GetAsync(**tier, gets).get()) {
    if (!r.status.ok()) Die("L3 get failed: " + r.status.ToString());
  }
  const double tier_r = Gbps(total, Seconds(start));
  for (uint32_t i = 0; i < count; ++i) {
    if (std::memcmp(out[i].get(), data.get(), value) != 0) Die("L3 returned wrong bytes");
  }
  RemoveAsync(**tier, [&] {
    std::vector<ChunkId> ids;
    for (uint32_t i = 0; i < count; ++i) ids.push_back(Id(i));
    return ids;
  }()).get();
  return {raw_w, raw_r, tier_w, tier_r};
}

void BenchRedis(const std::string& endpoint, uint64_t value, uint32_t count, uint32_t threads, uint32_t repeats) {
  std::printf("\n== L3 Redis %s: %u values of %.1f MiB (%.2f GB), %u connections, best of %u\n", endpoint.c_str(),
              count, double(value) / kMiB, value * count / 1e9, threads, repeats);
  RedisFigures f;
  for (uint32_t r = 0; r < repeats; ++r) {
    const RedisFigures m = MeasureRedis(endpoint, value, count, threads);
    f.raw_w = std::max(f.raw_w, m.raw_w), f.raw_r = std::max(f.raw_r, m.raw_r);
    f.tier_w = std::max(f.tier_w, m.tier_w), f.tier_r = std::max(f.tier_r, m.tier_r);
    std::printf("run %u: ratio put %.2f get %.2f\n", r + 1, m.tier_w / m.raw_w, m.tier_r / m.raw_r);
  }
  std::printf("raw pipelined SET %6.3f GB/s   GET %6.3f GB/s\n", f.raw_w, f.raw_r);
  std::printf("L3 RedisTier put  %6.3f GB/s   get %6.3f GB/s (verified, checksummed)\n", f.tier_w, f.tier_r);
  std::printf("ratio             put %.2f        get %.2f\n", f.tier_w / f.raw_w, f.tier_r / f.raw_r);
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
  app.add_option("--dir", dir, "Directory on the disk to measure (a scratch folder is made inside)");
  app.add_option("--chunk-mb", chunk_mb, "L2 chunk size in MiB");
  app.add_option("--chunks", count, "L2 chunks written and read");
  app.add_option("--threads", threads, "L2 thread-pool threads; L3 I/O threads and raw connections");
  app.add_option("--depth", depth, "L2 io_uring chunks in flight (and the raw io_uring queue depth)");
  app.add_option("--redis", redis, "HOST:PORT of the Redis to measure; default: a private redis-server");
  app.add_option("--value-mb", value_mb, "L3 value size in MiB");
  app.add_option("--values", values, "L3 values written and read");
  app.add_option("--index-chunks", index_chunks, "chunk files for the index rebuild");
  app.add_option("--index-chunk-mb", index_chunk_mb, "their (sparse) payload size in MiB");
  app.add_option("--only", only, "l2, index or l3");
  app.add_option("--repeat", repeats, "L2 and L3 runs, interleaved; the best of each figure is shown");
  CLI11_PARSE(app, argc, argv);

  char scratch[4096];
  std::snprintf(scratch, sizeof(scratch), "%s/kvstash-tier-bench-XXXXXX", dir.c_str());
  if (::mkdtemp(scratch) == nullptr) Die("cannot create a folder in " + dir);
  if (only.empty() || only == "l2") BenchDisk(scratch, uint64_t(chunk_mb * kMiB), count, threads, depth, repeats);
  if (only.empty() || only == "index") BenchIndex(scratch, index_chunks, uint64_t(index_chunk_mb * kMiB));
  if (only.empty() || only == "l3") {
    pid_t own = -1;
    if (redis.empty()) {
      const int port = 20000 + static_cast<int>(::getpid() % 30000);
      own = StartRedis(port);
      redis = "127.0.0.1:" + std::to_string(port);
    }
    BenchRedis(redis, uint64_t(value_mb * kMiB), values, threads, repeats);
    if (own > 0) {
      ::kill(own, SIGKILL);
      ::waitpid(own, nullptr, 0);
    }
  }
  std::system(("rm -rf '" + std::string(scratch) + "'").c_str());
  return 0;
}
