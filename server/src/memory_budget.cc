// MemAvailable, RLIMIT_MEMLOCK and the pool.
#include "memory_budget.h"

#include <sys/resource.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace kvstash::server {
namespace {

constexpr double kGiB = double(uint64_t{1} << 30);
constexpr int kCapIpcLock = 14;  // linux/capability.h

std::string Gib(uint64_t bytes) {
  char text[32];
  std::snprintf(text, sizeof(text), "%.2f GiB", double(bytes) / kGiB);
  return text;
}

bool HasCapIpcLock() {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind("CapEff:", 0) != 0) continue;
    const uint64_t caps = std::strtoull(line.c_str() + 7, nullptr, 16);
    return (caps >> kCapIpcLock) & 1;
  }
  return false;
}

}  // namespace

Result<MemoryFigures> ReadMemoryFigures(const std::string& meminfo) {
  MemoryFigures figures;
  std::ifstream in(meminfo);
  std::string line;
  bool found = false;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key, unit;
    uint64_t value = 0;
    if (!(fields >> key >> value)) continue;
    fields >> unit;
    if (key == "MemAvailable:") {
      figures.available_bytes = unit == "kB" ? value * 1024 : value;
      found = true;
    }
  }
  if (!found) {
    return Status::Unavailable("cannot read MemAvailable from " + meminfo +
                               " to check the L1 pool against the machine's memory");
  }
  rlimit limit{};
  figures.memlock_bytes = getrlimit(RLIMIT_MEMLOCK, &limit) == 0 && limit.rlim_cur != RLIM_INFINITY
                              ? uint64_t(limit.rlim_cur)
                              : UINT64_MAX;
  figures.can_lock_freely = HasCapIpcLock();
  return figures;
}

uint64_t PoolBytes(const config::ServerConfig& config, const MemoryFigures& figures) {
  if (config.l1_share > 0) return uint64_t(config.l1_share * double(figures.available_bytes));
  return uint64_t(config.l1_gb * kGiB);
}

Status CheckPoolFits(uint64_t pool_bytes, const std::string& backend,
                     const MemoryFigures& figures) {
  if (pool_bytes > figures.available_bytes) {
    return Status::Exhausted(
        "the L1 pool of " + Gib(pool_bytes) + " (" + std::to_string(pool_bytes) +
        " bytes) exceeds the memory available on this machine, MemAvailable " +
        Gib(figures.available_bytes) + " (" + std::to_string(figures.available_bytes) +
        " bytes, /proc/meminfo): lower --l1-gb, or size the pool with --l1-share");
  }
  if (backend == "cuda" && !figures.can_lock_freely && pool_bytes > figures.memlock_bytes) {
    return Status::Exhausted(
        "the L1 pool of " + Gib(pool_bytes) + " (" + std::to_string(pool_bytes) +
        " bytes) exceeds the locked-memory limit RLIMIT_MEMLOCK of " +
        std::to_string(figures.memlock_bytes) +
        " bytes (ulimit -l): raise it (docker --ulimit memlock=-1, LimitMEMLOCK=infinity) or "
        "lower --l1-gb");
  }
  return Status::Ok();
}

}  // namespace kvstash::server
