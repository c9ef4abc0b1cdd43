// The daemon's configuration. Every option is declared once, in the option
// table (src/option_table.cc), with its flag, KVSTASH_* environment variable,
// default, bounds and help; CLI11 flags, the config file, the environment,
// --help and the effective config shown by `kvstash describe` all derive
// from that table.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kvstash/endpoint.h"
#include "kvstash/status.h"

namespace kvstash::config {

// The choice options, parsed once from text into these and passed down
// typed. Their spellings, in enum order, are the only ones flags, config
// files, KVSTASH_* variables and `kvstash describe` use.
enum class BackendKind : uint8_t { kAuto, kHost, kCuda };
inline constexpr const char* kBackendKindNames[] = {"auto", "host", "cuda"};
enum class TransferMode : uint8_t { kDma, kDirect };
inline constexpr const char* kTransferModeNames[] = {"dma", "direct"};
enum class CompletionWait : uint8_t { kBlock, kPoll };
inline constexpr const char* kCompletionWaitNames[] = {"block", "poll"};
enum class Multipath : uint8_t { kOff, kOn };
inline constexpr const char* kMultipathNames[] = {"off", "on"};
enum class ShmChannel : uint8_t { kOn, kOff };
inline constexpr const char* kShmChannelNames[] = {"on", "off"};
enum class TierWrite : uint8_t { kWriteThrough, kOnEviction };
inline constexpr const char* kTierWriteNames[] = {"write-through", "on-eviction"};
enum class LogLevel : uint8_t { kTrace, kDebug, kInfo, kWarn, kError, kOff };
inline constexpr const char* kLogLevelNames[] = {"trace", "debug", "info", "warn", "error", "off"};

inline const char* NameOf(BackendKind kind) { return kBackendKindNames[size_t(kind)]; }
inline const char* NameOf(TransferMode mode) { return kTransferModeNames[size_t(mode)]; }
inline const char* NameOf(CompletionWait wait) { return kCompletionWaitNames[size_t(wait)]; }
inline const char* NameOf(Multipath multipath) { return kMultipathNames[size_t(multipath)]; }
inline const char* NameOf(ShmChannel channel) { return kShmChannelNames[size_t(channel)]; }
inline const char* NameOf(TierWrite write) { return kTierWriteNames[size_t(write)]; }
// Also spdlog's names for its levels (spdlog::level::from_str).
inline const char* NameOf(LogLevel level) { return kLogLevelNames[size_t(level)]; }

struct ServerConfig {
  std::string socket = kDefaultSocket;
  uint32_t socket_mode = 0660;  // file mode of an ipc:// socket
  BackendKind backend = BackendKind::kAuto;
  double l1_gb = 4.0;          // L1 pinned pool size
  double l1_share = 0;         // > 0: pool = this share of MemAvailable, not l1_gb
  uint32_t l1_slice_mb = 256;  // pinning and slab unit; no slot straddles one
  uint32_t chunk_tokens = 256;
  uint32_t max_chunks_per_request = 1024;
  uint32_t max_message_mb = 64;
  uint32_t lease_ms = 30000;         // default lookup lease
  uint32_t peer_timeout_ms = 10000;  // drop registrations of owners silent this long; 0 = never
  std::string admin_group =
      "none";  // group (name or gid) whose members are admins; none = no group
  uint32_t max_registrations_per_client = 64;
  // Per peer, not per connection (server/src/peer_budget.h): a process is
  // (uid, pid), a user its uid.
  uint32_t max_registrations_per_process = 256;
  uint32_t max_channels_per_process = 64;
  uint32_t max_mappings_per_user = 16384;  // allocations, boards and channels mapped
  uint32_t max_channel_mb_per_user = 2048;
  uint32_t max_in_flight_per_client = 256;  // Store/Retrieve/UnregisterKV awaiting their reply
  uint32_t max_leases_per_client = 4096;
  uint32_t max_leases = 65536;     // leases held by all clients together
  double max_leased_share = 0.5;   // leased bytes at most this share of the L1 pool
  uint32_t max_lease_ms = 600000;  // longest lease a Lookup may ask for
  uint32_t copy_threads = 0;       // host copies; 0 = auto
  uint32_t pin_threads = 0;        // background pinning; 0 = auto
  TransferMode transfer_mode = TransferMode::kDma;  // CUDA backend
  uint32_t staging_mb = 256;                        // GPU staging ring per device (dma mode)
  CompletionWait completion_wait = CompletionWait::kBlock;  // CUDA backend
  // Retrieves into one GPU (and stores out of it) also through idle NVLink peers
  Multipath multipath = Multipath::kOn;
  uint32_t multipath_staging_mb = 128;       // each helping GPU's staging, half per direction (dma)
  uint32_t multipath_min_path_kib = 2048;    // fewer bytes per path: fewer paths
  uint32_t multipath_piece_kib = 8192;       // the size a multi-path copy is cut to (dma)
  uint32_t busy_poll_us = 50;                // the spin window (kvstash::AdaptiveSpin); 0 = never
  ShmChannel shm_channel = ShmChannel::kOn;  // attach same-host clients' shared-memory channels
  std::string l2_path;                       // L2 directory; empty = no L2
  double l2_gb = 64.0;                       // L2 capacity
  uint32_t l2_io_threads = 4;
  TierWrite tier_write = TierWrite::kWriteThrough;  // when chunks go to L2/L3
  std::string l3_redis;                             // HOST:PORT[,HOST:PORT...]; empty = no L3
  std::string l3_user;                              // ACL user; empty = password alone
  std::string l3_password;                          // empty = no AUTH; never shown
  uint32_t l3_connect_timeout_ms = 500;
  uint32_t l3_timeout_ms = 2000;
  uint32_t l3_io_threads = 4;
  uint32_t l3_part_mb = 16;  // largest value written; chunks split above
  uint32_t l3_ttl_s = 0;     // 0 = no expiry
  uint32_t l3_breaker_failures = 3;
  uint32_t l3_breaker_open_ms = 1000;
  LogLevel log_level = LogLevel::kInfo;
  uint32_t metrics_port = 0;  // Prometheus endpoint; 0 = off
  std::string metrics_bind = "127.0.0.1";
};

// What parsing decided: run with this config, or exit (after --help,
// --version or --print-config, or on a bad option) with the given code and
// text to print: to stdout when exit_code is 0, to stderr otherwise.
struct ParseOutcome {
  ServerConfig config;
  bool should_exit = false;
  int exit_code = 0;
  std::string output;  // help text or the error message
};

// ParseOutcome::exit_code for a bad flag, variable or config file, as
// getopt-style tools use.
inline constexpr int kUsageExitCode = 2;

// Parses argv, then a config file named by --config / KVSTASH_CONFIG, then
// KVSTASH_* variables (flags win over the environment, which wins over the
// file). Bounds violations are errors naming the option, the value and the
// bounds.
ParseOutcome ParseServerConfig(int argc, const char* const* argv);

// The effective configuration as (name, value) pairs in table order, for
// `kvstash describe` and the startup log. Passwords show as "(set)".
std::vector<std::pair<std::string, std::string>> EffectiveConfig(const ServerConfig& config);

// An option's value as its type: unsigned and floating-point numbers, or
// text (strings, choices, file modes as "0660", passwords as "(set)").
using ConfigValue = std::variant<uint64_t, double, std::string>;

// EffectiveConfig() with typed values, for `kvstash describe --json`.
std::vector<std::pair<std::string, ConfigValue>> EffectiveConfigValues(const ServerConfig& config);

}  // namespace kvstash::config
