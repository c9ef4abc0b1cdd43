// Start-up checks of the L1 pool against the machine: the pool must fit in
// the memory available now (MemAvailable in /proc/meminfo), and, for the CUDA
// backend, under RLIMIT_MEMLOCK unless the process may lock memory freely
// (CAP_IPC_LOCK). A pool that does not fit is refused before a byte is
// touched, with both figures, instead of paging until the OOM killer picks
// a victim, possibly an engine. --l1-share sizes the pool as a share of
// MemAvailable instead.
#pragma once

#include <cstdint>
#include <string>

#include "kvstash/config/server_config.h"
#include "kvstash/status.h"

namespace kvstash::server {

struct MemoryFigures {
  uint64_t available_bytes = 0;  // MemAvailable
  uint64_t memlock_bytes = 0;    // RLIMIT_MEMLOCK soft limit; UINT64_MAX: unlimited
  bool can_lock_freely = false;  // CAP_IPC_LOCK in the effective set
};

// Reads MemAvailable from `meminfo` (normally /proc/meminfo), the memlock
// limit and CAP_IPC_LOCK of this process.
Result<MemoryFigures> ReadMemoryFigures(const std::string& meminfo = "/proc/meminfo");

// The pool size the config asks for: l1_share of MemAvailable when set, else
// l1_gb GiB.
uint64_t PoolBytes(const config::ServerConfig& config, const MemoryFigures& figures);

// Ok when `pool_bytes` fits; otherwise ResourceExhausted naming the pool,
// the figure it exceeds and what to change. `backend` is the backend's name
// ("cuda" checks the memlock limit too).
Status CheckPoolFits(uint64_t pool_bytes, const std::string& backend, const MemoryFigures& figures);

}  // namespace kvstash::server
