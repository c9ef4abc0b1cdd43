// The tiers against their raw limits (tier_limits.h).
#include "kvstash/bench/tier_limits.h"

#include <fcntl.h>
#include <hiredis/hiredis.h>
#include <liburing.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <mutex>
#include <random>
#include <thread>
#include <tuple>
#include <utility>

#include "kvstash/tiers/disk_tier.h"
#include "kvstash/tiers/redis_tier.h"

namespace kvstash::bench {
namespace {

using namespace kvstash::tiers;  // NOLINT: the tier types throughout
using Clock = std::chrono::steady_clock;
constexpr uint64_t kMiB = 1ull << 20;
constexpr uint64_t kBlock = 4096;

double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}
double Gbps(uint64_t bytes, double seconds) { return bytes / seconds / 1e9; }

struct FreeDeleter {
  void operator()(uint8_t* p) const { std::free(p); }
};
using Buffer = std::unique_ptr<uint8_t, FreeDeleter>;
Buffer Aligned(uint64_t bytes) {
  auto* p =
      static_cast<uint8_t*>(std::aligned_alloc(kBlock, (bytes + kBlock - 1) / kBlock * kBlock));
  if (p == nullptr) throw std::bad_alloc();
  return Buffer(p);
}

void Fill(uint8_t* p, uint64_t bytes, uint64_t seed) {
  std::mt19937_64 random(seed);
  for (uint64_t i = 0; i + 8 <= bytes; i += 8) {
    const uint64_t v = random();
    std::memcpy(p + i, &v, 8);
  }
}

// Keys of the bench's chunks, in a scope of their own (0x5c...): nothing an
// engine stores can collide with them.
ChunkId Id(uint64_t i) {
  ChunkId id;
  std::mt19937_64 random(i * 7919 + 1);
  for (size_t k = 0; k < 32; k += 8) {
    const uint64_t a = random();
    std::memcpy(id.key.data() + k, &a, 8);
  }
  std::memset(id.scope.data(), 0x5c, 32);
  return id;
}

std::string Format(const char* format, ...) {
  char text[512];
  va_list args;
  va_start(args, format);
  std::vsnprintf(text, sizeof(text), format, args);
  va_end(args);
  return text;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Drops a file's pages from the page cache, so the next read goes to disk.
void Uncache(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return;
  ::fdatasync(fd);
  ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
  ::close(fd);
}

Status Errno(const std::string& what) {
  return Status::Internal(what + ": " + std::strerror(errno));
}

// ---------------------------------------------------------------- raw disk

// A fresh file `total` bytes long, its blocks allocated (unwritten), as a
// new chunk file's are once written: extending O_DIRECT writes of one file
// would serialize on its inode (ext4) and understate the disk, while
// overwriting blocks written a moment ago skips the extent conversion that
// every chunk write of the tier pays (about 1.5x faster on a virtual disk).
Status Preallocate(const std::string& path, uint64_t total) {
  ::unlink(path.c_str());
  const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0640);
  if (fd < 0) return Errno("cannot create " + path);
  const int err = ::posix_fallocate(fd, 0, static_cast<off_t>(total));
  ::fsync(fd);
  ::close(fd);
  if (err != 0)
    return Status::Internal("cannot allocate " + std::to_string(total) + " bytes for " + path);
  return Status::Ok();
}

// Sequential O_DIRECT transfer of `total` bytes in `block`-byte pieces, one
// at a time (pwrite / pread). Seconds.
Result<double> RawSync(const std::string& path, bool write, uint64_t block, uint64_t total,
                       uint8_t* buffer) {
  const int fd = ::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC, 0640);
  if (fd < 0) return Errno("cannot open " + path + " with O_DIRECT");
  const auto start = Clock::now();
  for (uint64_t off = 0; off < total; off += block) {
    const ssize_t n = write ? ::pwrite(fd, buffer, block, static_cast<off_t>(off))
                            : ::pread(fd, buffer, block, static_cast<off_t>(off));
    if (n != static_cast<ssize_t>(block)) {
      ::close(fd);
      return Errno("raw transfer on " + path + " failed");
    }
  }
  if (write) ::fdatasync(fd);
  const double s = Seconds(start);
  ::close(fd);
  return s;
}

// The same through io_uring with `depth` transfers in flight. Seconds.
Result<double> RawUring(const std::string& path, bool write, uint64_t block, uint64_t total,
                        uint32_t depth, const std::vector<uint8_t*>& buffers) {
  const int fd = ::open(path.c_str(), (write ? O_WRONLY : O_RDONLY) | O_DIRECT | O_CLOEXEC, 0640);
  if (fd < 0) return Errno("cannot open " + path + " with O_DIRECT");
  io_uring ring;
  if (const int err = io_uring_queue_init(depth, &ring, 0); err < 0) {
    ::close(fd);
    return Status::Unavailable(std::string("io_uring_queue_init failed: ") + std::strerror(-err));
  }
  const auto start = Clock::now();
  uint64_t next = 0, done = 0;
  uint32_t in_flight = 0;
  Status failed;
  while (done < total && failed.ok()) {
    while (in_flight < depth && next < total) {
      io_uring_sqe* sqe = io_uring_get_sqe(&ring);
      uint8_t* buf = buffers[(next / block) % buffers.size()];
      if (write) {
        io_uring_prep_write(sqe, fd, buf, static_cast<unsigned>(block), next);
      } else {
        io_uring_prep_read(sqe, fd, buf, static_cast<unsigned>(block), next);
      }
      next += block;
      ++in_flight;
    }
    io_uring_submit(&ring);
    io_uring_cqe* cqe = nullptr;
    if (io_uring_wait_cqe(&ring, &cqe) != 0 || cqe->res != static_cast<int>(block)) {
      failed = Status::Internal("io_uring transfer on " + path + " failed");
      break;
    }
    io_uring_cqe_seen(&ring, cqe);
    --in_flight;
    done += block;
  }
  if (write) ::fdatasync(fd);
  const double s = Seconds(start);
  io_uring_queue_exit(&ring);
  ::close(fd);
  if (!failed.ok()) return failed;
  return s;
}

// One DiskTier: every chunk a Put, all in one batch, then (pages dropped)
// every chunk a Get into faulted-in buffers (as L1's pinned slots are),
// verified. GB/s each way.
Result<std::pair<double, double>> MeasureTier(const std::string& dir, DiskTierOptions options,
                                              uint64_t chunk, uint32_t count,
                                              const std::vector<uint8_t*>& buffers) {
  const uint64_t total = chunk * count;
  std::pair<double, double> out;
  Status status;
  {
    options.path = dir;
    options.capacity_bytes = total * 2 + (64ull << 20);
    auto tier = DiskTier::Open(options);
    if (!tier.ok()) return tier.status();
    if (options.io_uring && std::string((*tier)->io_engine()) != "io_uring") {
      return Status::Unavailable("io_uring was refused: " + (*tier)->io_uring_refused_reason());
    }
    std::vector<PutRequest> puts;
    for (uint32_t i = 0; i < count; ++i)
      puts.push_back({Id(i), {}, 256, buffers[i % buffers.size()], chunk});
    auto start = Clock::now();
    for (const PutResult& r : PutAsync(**tier, puts).get()) {
      if (r.outcome != PutOutcome::kStored)
        return Status::Internal("L2 put failed: " + r.status.ToString());
    }
    out.first = Gbps(total, Seconds(start));
    for (uint32_t i = 0; i < count; ++i) Uncache((*tier)->PathOf(Id(i)));
    std::vector<Buffer> got;
    std::vector<GetRequest> gets;
    for (uint32_t i = 0; i < count; ++i) {
      got.push_back(Aligned(chunk));
      std::memset(got.back().get(), 0, chunk);
      gets.push_back({{Id(i), {}, chunk}, got.back().get()});
    }
    start = Clock::now();
    for (const GetResult& r : GetAsync(**tier, gets).get()) {
      if (!r.status.ok()) return Status::Internal("L2 get failed: " + r.status.ToString());
    }
    out.second = Gbps(total, Seconds(start));
    for (uint32_t i = 0; i < count; ++i) {
      if (std::memcmp(got[i].get(), buffers[i % buffers.size()], chunk) != 0) {
        return Status::Internal("L2 returned wrong bytes for chunk " + std::to_string(i));
      }
    }
  }
  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
  return out;
}

Result<DiskRun> MeasureDiskOnce(const std::string& dir, const DiskLimitConfig& c,
                                const std::vector<uint8_t*>& buffers) {
  DiskRun f;
  const uint64_t chunk = c.chunk_bytes;
  const uint64_t total = chunk * c.chunks;
  const uint64_t block = (chunk + kBlock - 1) / kBlock * kBlock;
  const uint64_t file = block * c.chunks;
  const std::string raw = dir + "/raw.bin";
  KVSTASH_RETURN_IF_ERROR(Preallocate(raw, file));
  Result<double> w_sync = RawSync(raw, true, block, file, buffers[0]);
  if (!w_sync.ok()) return w_sync.status();
  Uncache(raw);
  Result<double> r_sync = RawSync(raw, false, block, file, buffers[0]);
  if (!r_sync.ok()) return r_sync.status();
  KVSTASH_RETURN_IF_ERROR(Preallocate(raw, file));
  const uint32_t qd = c.rings * c.depth;
  Result<double> w_uring = RawUring(raw, true, block, file, qd, buffers);
  if (!w_uring.ok()) return w_uring.status();
  Uncache(raw);
  Result<double> r_uring = RawUring(raw, false, block, file, qd, buffers);
  if (!r_uring.ok()) return r_uring.status();
  ::unlink(raw.c_str());
  f.w_sync = Gbps(total, *w_sync), f.r_sync = Gbps(total, *r_sync);
  f.w_uring = Gbps(total, *w_uring), f.r_uring = Gbps(total, *r_uring);

  DiskTierOptions uring;  // the daemon's defaults: io_uring, 2 rings
  uring.io_uring = true;
  uring.io_rings = c.rings;
  uring.io_depth = c.depth;
  auto tier = MeasureTier(dir + "/l2", uring, chunk, c.chunks, buffers);
  if (!tier.ok()) return tier.status();
  std::tie(f.tier_w, f.tier_r) = *tier;
  if (c.pool_threads > 0) {
    DiskTierOptions pool;
    pool.io_uring = false;
    pool.io_threads = c.pool_threads;
    auto pooled = MeasureTier(dir + "/l2-pool", pool, chunk, c.chunks, buffers);
    if (!pooled.ok()) return pooled.status();
    std::tie(f.pool_w, f.pool_r) = *pooled;
  }
  return f;
}

// ---------------------------------------------------------------- raw Redis

struct Endpoint {
  std::string host;
  int port = 0;
};

Result<Endpoint> ParseEndpoint(const std::string& text) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon == 0) {
    return Status::InvalidArgument("Redis endpoint '" + text + "' is not HOST:PORT");
  }
  Endpoint e{text.substr(0, colon), 0};
  try {
    e.port = std::stoi(text.substr(colon + 1));
  } catch (const std::exception&) {
    e.port = 0;
  }
  if (e.port <= 0 || e.port > 65535) {
    return Status::InvalidArgument("Redis endpoint '" + text + "' has no port in 1..65535");
  }
  return e;
}

Result<redisContext*> Connect(const Endpoint& e, const RedisLimitConfig& c) {
  redisContext* ctx = redisConnect(e.host.c_str(), e.port);
  if (ctx == nullptr || ctx->err) {
    const std::string why = ctx ? ctx->errstr : "out of memory";
    if (ctx) redisFree(ctx);
    return Status::Unavailable("cannot connect to Redis " + e.host + ":" + std::to_string(e.port) +
                               ": " + why);
  }
  if (!c.password.empty()) {
    auto* r = static_cast<redisReply*>(
        c.user.empty() ? redisCommand(ctx, "AUTH %b", c.password.data(), c.password.size())
                       : redisCommand(ctx, "AUTH %b %b", c.user.data(), c.user.size(),
                                      c.password.data(), c.password.size()));
    const bool ok = r != nullptr && r->type != REDIS_REPLY_ERROR;
    if (r) freeReplyObject(r);
    if (!ok) {
      redisFree(ctx);
      return Status::Unavailable("Redis " + e.host + ":" + std::to_string(e.port) +
                                 " refused AUTH");
    }
  }
  return ctx;
}

// `connections` connections, each pipelining SET (or GET) of its share of
// the keys. Seconds.
Result<double> RawRedis(const Endpoint& e, const RedisLimitConfig& c, bool set,
                        const uint8_t* data) {
  std::atomic<bool> ok{true};
  std::string error;
  std::mutex error_mutex;
  const auto start = Clock::now();
  std::vector<std::thread> workers;
  for (uint32_t t = 0; t < c.connections; ++t) {
    workers.emplace_back([&, t] {
      Result<redisContext*> ctx = Connect(e, c);
      if (!ctx.ok()) {
        ok = false;
        std::lock_guard<std::mutex> lock(error_mutex);
        error = ctx.status().ToString();
        return;
      }
      std::vector<std::string> keys;
      for (uint32_t i = t; i < c.values; i += c.connections)
        keys.push_back("kvstash-rawbench:" + std::to_string(i));
      for (const std::string& k : keys) {
        if (set) {
          const char* argv[] = {"SET", k.c_str(), reinterpret_cast<const char*>(data)};
          const size_t lens[] = {3, k.size(), c.value_bytes};
          redisAppendCommandArgv(*ctx, 3, argv, lens);
        } else {
          const char* argv[] = {"GET", k.c_str()};
          const size_t lens[] = {3, k.size()};
          redisAppendCommandArgv(*ctx, 2, argv, lens);
        }
      }
      for (size_t i = 0; i < keys.size(); ++i) {
        void* reply = nullptr;
        if (redisGetReply(*ctx, &reply) != REDIS_OK) {
          ok = false;
          break;
        }
        const redisReply* r = static_cast<redisReply*>(reply);
        if (r->type == REDIS_REPLY_ERROR ||
            (!set && (r->type != REDIS_REPLY_STRING || r->len != c.value_bytes))) {
          ok = false;
          std::lock_guard<std::mutex> lock(error_mutex);
          error = r->type == REDIS_REPLY_ERROR ? std::string(r->str, r->len)
                                               : "GET returned another value";
        }
        freeReplyObject(reply);
      }
      redisFree(*ctx);
    });
  }
  for (std::thread& w : workers) w.join();
  if (!ok)
    return Status::Unavailable("raw pipelined " + std::string(set ? "SET" : "GET") +
                               " failed: " + error);
  return Seconds(start);
}

void DeleteRawKeys(const Endpoint& e, const RedisLimitConfig& c) {
  Result<redisContext*> ctx = Connect(e, c);
  if (!ctx.ok()) return;
  for (uint32_t i = 0; i < c.values; ++i) {
    if (void* r = redisCommand(*ctx, "DEL kvstash-rawbench:%u", i)) freeReplyObject(r);
  }
  redisFree(*ctx);
}

Result<RedisRun> MeasureRedisOnce(const Endpoint& e, const RedisLimitConfig& c,
                                  const uint8_t* data) {
  RedisRun run;
  const uint64_t total = c.value_bytes * c.values;
  Result<double> set = RawRedis(e, c, true, data);
  if (!set.ok()) return set.status();
  Result<double> get = RawRedis(e, c, false, data);
  DeleteRawKeys(e, c);
  if (!get.ok()) return get.status();
  run.raw_set = Gbps(total, *set);
  run.raw_get = Gbps(total, *get);

  RedisTierOptions options;
  options.servers = {c.endpoint};
  options.user = c.user;
  options.password = c.password;
  options.key_prefix = "kvstash-bench";
  options.io_threads = c.connections;
  options.command_timeout_ms = 30000;
  options.max_pending_put_bytes = std::max<uint64_t>(options.max_pending_put_bytes, 2 * total);
  auto tier = RedisTier::Open(options);
  if (!tier.ok()) return tier.status();
  std::vector<ChunkId> ids;
  std::vector<PutRequest> puts;
  for (uint32_t i = 0; i < c.values; ++i) {
    ids.push_back(Id(i));
    puts.push_back({Id(i), {}, 256, data, c.value_bytes});
  }
  auto start = Clock::now();
  for (const PutResult& r : PutAsync(**tier, puts).get()) {
    if (r.outcome != PutOutcome::kStored)
      return Status::Internal("L3 put failed: " + r.status.ToString());
  }
  run.tier_put = Gbps(total, Seconds(start));
  std::vector<Buffer> out;
  std::vector<GetRequest> gets;
  for (uint32_t i = 0; i < c.values; ++i) {
    out.push_back(Aligned(c.value_bytes));
    std::memset(out.back().get(), 0, c.value_bytes);
    gets.push_back({{Id(i), {}, c.value_bytes}, out.back().get()});
  }
  start = Clock::now();
  Status got;
  for (const GetResult& r : GetAsync(**tier, gets).get()) {
    if (!r.status.ok()) got = Status::Internal("L3 get failed: " + r.status.ToString());
  }
  run.tier_get = Gbps(total, Seconds(start));
  RemoveAsync(**tier, ids).get();
  KVSTASH_RETURN_IF_ERROR(got);
  for (uint32_t i = 0; i < c.values; ++i) {
    if (std::memcmp(out[i].get(), data, c.value_bytes) != 0) {
      return Status::Internal("L3 returned wrong bytes for value " + std::to_string(i));
    }
  }
  return run;
}

}  // namespace

Result<DiskLimits> MeasureDiskLimits(const DiskLimitConfig& config) {
  if (config.chunk_bytes == 0 || config.chunks == 0 || config.rings == 0 || config.depth == 0 ||
      config.runs == 0) {
    return Status::InvalidArgument(
        "the L2 bench needs a chunk size, a chunk count, rings, a depth and runs "
        "above 0");
  }
  std::string pattern = config.dir + "/kvstash-tier-bench-XXXXXX";
  if (::mkdtemp(pattern.data()) == nullptr)
    return Errno("cannot create a scratch folder in " + config.dir);
  const std::string scratch = pattern;
  std::vector<Buffer> owned;
  std::vector<uint8_t*> buffers;
  for (uint32_t i = 0; i < std::max(config.rings * config.depth, config.pool_threads); ++i) {
    owned.push_back(Aligned(config.chunk_bytes + 2 * kBlock));
    Fill(owned.back().get(), config.chunk_bytes + 2 * kBlock, i + 1);
    buffers.push_back(owned.back().get());
  }
  DiskLimits limits;
  limits.config = config;
  std::vector<double> w, r, pw, pr;
  Status status;
  for (uint32_t i = 0; i < config.runs && status.ok(); ++i) {
    Result<DiskRun> run = MeasureDiskOnce(scratch, config, buffers);
    if (!run.ok()) {
      status = run.status();
      break;
    }
    limits.runs.push_back(*run);
    w.push_back(run->tier_w / run->raw_w()), r.push_back(run->tier_r / run->raw_r());
    pw.push_back(run->pool_w / run->raw_w()), pr.push_back(run->pool_r / run->raw_r());
  }
  std::error_code ec;
  std::filesystem::remove_all(scratch, ec);
  KVSTASH_RETURN_IF_ERROR(status);
  limits.write_ratio = Median(w), limits.read_ratio = Median(r);
  limits.pool_write_ratio = Median(pw), limits.pool_read_ratio = Median(pr);
  return limits;
}

std::string DiskLimitsText(const DiskLimits& l) {
  const DiskLimitConfig& c = l.config;
  std::string out =
      Format("L2 local disk: %u chunks of %.1f MiB (%.2f GB) in %s, io_uring %u x depth %u",
             c.chunks, double(c.chunk_bytes) / kMiB, double(c.chunk_bytes) * c.chunks / 1e9,
             c.dir.c_str(), c.rings, c.depth);
  if (c.pool_threads) out += Format(", thread pool of %u", c.pool_threads);
  out += Format(", %u runs\n", c.runs);
  for (size_t i = 0; i < l.runs.size(); ++i) {
    const DiskRun& m = l.runs[i];
    out += Format(
        "  run %zu: raw O_DIRECT write %.3f read %.3f GB/s (QD1 %.3f %.3f, io_uring QD%u %.3f "
        "%.3f) | "
        "L2 write %.3f read %.3f GB/s, ratio %.2f %.2f",
        i + 1, m.raw_w(), m.raw_r(), m.w_sync, m.r_sync, c.rings * c.depth, m.w_uring, m.r_uring,
        m.tier_w, m.tier_r, m.tier_w / m.raw_w(), m.tier_r / m.raw_r());
    if (c.pool_threads) {
      out += Format(" | thread pool %.3f %.3f, ratio %.2f %.2f", m.pool_w, m.pool_r,
                    m.pool_w / m.raw_w(), m.pool_r / m.raw_r());
    }
    out += "\n";
  }
  out += Format("  L2 (io_uring) vs raw, median run:     write %.2f  read %.2f  (target 0.90)\n",
                l.write_ratio, l.read_ratio);
  if (c.pool_threads) {
    out += Format("  L2 (thread pool) vs raw, median run:  write %.2f  read %.2f\n",
                  l.pool_write_ratio, l.pool_read_ratio);
  }
  return out;
}

Result<RedisLimits> MeasureRedisLimits(const RedisLimitConfig& config) {
  if (config.value_bytes == 0 || config.values == 0 || config.connections == 0 ||
      config.runs == 0) {
    return Status::InvalidArgument(
        "the L3 bench needs a value size, a value count, connections and runs above 0");
  }
  Result<Endpoint> endpoint = ParseEndpoint(config.endpoint);
  if (!endpoint.ok()) return endpoint.status();
  Buffer data = Aligned(config.value_bytes);
  Fill(data.get(), config.value_bytes, 42);
  RedisLimits limits;
  limits.config = config;
  std::vector<double> put, get;
  for (uint32_t i = 0; i < config.runs; ++i) {
    Result<RedisRun> run = MeasureRedisOnce(*endpoint, config, data.get());
    if (!run.ok()) return run.status();
    limits.runs.push_back(*run);
    put.push_back(run->tier_put / run->raw_set), get.push_back(run->tier_get / run->raw_get);
  }
  limits.put_ratio = Median(put), limits.get_ratio = Median(get);
  return limits;
}

std::string RedisLimitsText(const RedisLimits& l) {
  const RedisLimitConfig& c = l.config;
  std::string out =
      Format("L3 Redis %s: %u values of %.1f MiB (%.2f GB), %u connections, %u runs\n",
             c.endpoint.c_str(), c.values, double(c.value_bytes) / kMiB,
             double(c.value_bytes) * c.values / 1e9, c.connections, c.runs);
  for (size_t i = 0; i < l.runs.size(); ++i) {
    const RedisRun& m = l.runs[i];
    out += Format(
        "  run %zu: raw pipelined SET %.3f GET %.3f GB/s | L3 put %.3f get %.3f GB/s, ratio %.2f "
        "%.2f\n",
        i + 1, m.raw_set, m.raw_get, m.tier_put, m.tier_get, m.tier_put / m.raw_set,
        m.tier_get / m.raw_get);
  }
  out += Format("  L3 vs raw, median run:  put %.2f  get %.2f  (target 0.80)\n", l.put_ratio,
                l.get_ratio);
  return out;
}

}  // namespace kvstash::bench
