// The option table (Redis config.c's static_configs[]): each option of
// kvstashd is declared here once. Flags, KVSTASH_* variables, config-file
// keys, --help, bounds checks and EffectiveConfig() all read this table, so
// adding an option is one line here plus its ServerConfig member (and its
// entry in config/kvstash.conf.example, which a test enforces).
#include "option_table.h"

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <utility>

namespace kvstash::config::internal {
namespace {

// Factories in the manner of Redis's createIntConfig(): one call per option,
// arguments in the same order for every type.
// Numbers of either type: bounds are kept as doubles, which hold every
// uint32_t exactly.
template <typename T>
OptionSpec NumberOption(std::string name, std::string env, T ServerConfig::*member, T min, T max,
                        std::string help) {
  OptionSpec spec;
  spec.name = std::move(name);
  spec.env = std::move(env);
  spec.member = member;
  spec.min = min;
  spec.max = max;
  spec.help = std::move(help);
  return spec;
}

OptionSpec UintOption(std::string name, std::string env, uint32_t ServerConfig::*member,
                      uint32_t min, uint32_t max, std::string help) {
  return NumberOption(std::move(name), std::move(env), member, min, max, std::move(help));
}

OptionSpec ModeOption(std::string name, std::string env, uint32_t ServerConfig::*member,
                      std::string help) {
  OptionSpec spec = UintOption(std::move(name), std::move(env), member, 0, 0777, std::move(help));
  spec.octal = true;
  return spec;
}

OptionSpec FloatOption(std::string name, std::string env, double ServerConfig::*member, double min,
                       double max, std::string help) {
  return NumberOption(std::move(name), std::move(env), member, min, max, std::move(help));
}

OptionSpec StringOption(std::string name, std::string env, std::string ServerConfig::*member,
                        std::string help) {
  OptionSpec spec;
  spec.name = std::move(name);
  spec.env = std::move(env);
  spec.member = member;
  spec.help = std::move(help);
  return spec;
}

// A string that may be empty: the feature it configures is then off.
OptionSpec OptionalStringOption(std::string name, std::string env,
                                std::string ServerConfig::*member, std::string help) {
  OptionSpec spec = StringOption(std::move(name), std::move(env), member, std::move(help));
  spec.allow_empty = true;
  return spec;
}

OptionSpec SecretOption(std::string name, std::string env, std::string ServerConfig::*member,
                        std::string help) {
  OptionSpec spec = OptionalStringOption(std::move(name), std::move(env), member, std::move(help));
  spec.secret = true;
  return spec;
}

// A choice: `names` spells its values, in enum order for an enum member.
template <typename E, size_t N>
OptionSpec EnumOption(std::string name, std::string env, E ServerConfig::*member,
                      const char* const (&names)[N], std::string help) {
  OptionSpec spec;
  spec.name = std::move(name);
  spec.env = std::move(env);
  spec.member = member;
  spec.help = std::move(help);
  spec.choices.assign(names, names + N);
  return spec;
}

constexpr uint32_t kMaxThreads = 1024;

std::vector<OptionSpec> BuildTable() {
  using C = ServerConfig;
  return {
      StringOption("socket", "KVSTASH_SOCKET", &C::socket,
                   "ZeroMQ endpoint the daemon binds: ipc://PATH, or tcp://HOST:PORT"),
      ModeOption("socket-mode", "KVSTASH_SOCKET_MODE", &C::socket_mode,
                 "File mode of an ipc:// socket, octal; engines need read and write"),
      EnumOption("backend", "KVSTASH_BACKEND", &C::backend, kBackendKindNames,
                 "Memory backend: cuda (CUDA IPC), host (POSIX shared memory, no GPU), "
                 "or auto (cuda when a GPU is visible)"),
      FloatOption("l1-gb", "KVSTASH_L1_GB", &C::l1_gb, 0.001, 65536,
                  "L1 pool size in GiB of pinned host memory; kvstashd refuses to start when it "
                  "exceeds MemAvailable"),
      FloatOption("l1-share", "KVSTASH_L1_SHARE", &C::l1_share, 0, 0.9,
                  "L1 pool size as a share of the memory available at start (MemAvailable); "
                  "0.5 = half. Replaces --l1-gb when above 0"),
      UintOption("l1-slice-mb", "KVSTASH_L1_SLICE_MB", &C::l1_slice_mb, 1, 65536,
                 "Pinning unit in MiB; no slot straddles two slices"),
      UintOption("chunk-tokens", "KVSTASH_CHUNK_TOKENS", &C::chunk_tokens, 1, 65536,
                 "Tokens per stored chunk; a multiple of every engine's block size"),
      UintOption("max-chunks-per-request", "KVSTASH_MAX_CHUNKS_PER_REQUEST",
                 &C::max_chunks_per_request, 1, 1 << 20,
                 "Most chunks or keys one request may name"),
      UintOption("max-message-mb", "KVSTASH_MAX_MESSAGE_MB", &C::max_message_mb, 1, 4096,
                 "Largest request message in MiB"),
      UintOption("lease-ms", "KVSTASH_LEASE_MS", &C::lease_ms, 1, 3600000,
                 "Default lookup lease in milliseconds"),
      UintOption("peer-timeout-ms", "KVSTASH_PEER_TIMEOUT_MS", &C::peer_timeout_ms, 0, 86400000,
                 "Drop the registrations of an engine silent this long (it died); "
                 "0 = keep them until UnregisterKV"),
      StringOption("admin-group", "KVSTASH_ADMIN_GROUP", &C::admin_group,
                   "Group (name or gid) whose members are admins, besides root and the "
                   "daemon's own user: they may Clear every scope and see every registration "
                   "in describe; none = no admin group"),
      UintOption("max-registrations-per-client", "KVSTASH_MAX_REGISTRATIONS_PER_CLIENT",
                 &C::max_registrations_per_client, 1, 1 << 20,
                 "Most registrations one connection may hold"),
      UintOption("max-registrations-per-process", "KVSTASH_MAX_REGISTRATIONS_PER_PROCESS",
                 &C::max_registrations_per_process, 1, 1 << 20,
                 "Most registrations one client process (uid and pid on the ipc socket) may "
                 "hold over all its connections"),
      UintOption("max-channels-per-process", "KVSTASH_MAX_CHANNELS_PER_PROCESS",
                 &C::max_channels_per_process, 1, 4096,
                 "Most shared-memory channels one client process may have attached over all "
                 "its connections; its further clients use the socket"),
      UintOption("max-mappings-per-user", "KVSTASH_MAX_MAPPINGS_PER_USER",
                 &C::max_mappings_per_user, 1, 1 << 24,
                 "Most memory mappings (registered allocations, completion boards, channels) "
                 "kvstashd holds for the processes of one uid; all users together get at most "
                 "half of vm.max_map_count"),
      UintOption("max-channel-mb-per-user", "KVSTASH_MAX_CHANNEL_MB_PER_USER",
                 &C::max_channel_mb_per_user, 1, 1 << 24,
                 "Most MiB of shared-memory channel segments kvstashd maps for the processes "
                 "of one uid"),
      UintOption("max-in-flight-per-client", "KVSTASH_MAX_IN_FLIGHT_PER_CLIENT",
                 &C::max_in_flight_per_client, 1, 1 << 20,
                 "Most Store, Retrieve and UnregisterKV requests of one connection awaiting "
                 "their reply; more are refused at once (ResourceExhausted)"),
      UintOption("max-leases-per-client", "KVSTASH_MAX_LEASES_PER_CLIENT",
                 &C::max_leases_per_client, 1, 1 << 24,
                 "Most lookup leases one connection may hold"),
      UintOption("max-leases", "KVSTASH_MAX_LEASES", &C::max_leases, 1, 1 << 24,
                 "Most lookup leases held by all connections together"),
      FloatOption("max-leased-share", "KVSTASH_MAX_LEASED_SHARE", &C::max_leased_share, 0.01, 1,
                  "Share of the L1 pool that leased chunks may take; a Lookup's leased prefix "
                  "stops there, so leases cannot starve other stores"),
      UintOption("max-lease-ms", "KVSTASH_MAX_LEASE_MS", &C::max_lease_ms, 1, 3600000,
                 "Longest lease a Lookup may ask for, in milliseconds; longer asks are clamped"),
      UintOption("copy-threads", "KVSTASH_COPY_THREADS", &C::copy_threads, 0, kMaxThreads,
                 "Threads for host-side copies; 0 = one per core, at most 32"),
      UintOption("pin-threads", "KVSTASH_PIN_THREADS", &C::pin_threads, 0, kMaxThreads,
                 "Threads pinning the pool in the background; 0 = one per core"),
      EnumOption("transfer-mode", "KVSTASH_TRANSFER_MODE", &C::transfer_mode, kTransferModeNames,
                 "CUDA backend: dma (gather into GPU staging, copy engines) or direct "
                 "(kernels access pinned host memory)"),
      UintOption("staging-mb", "KVSTASH_STAGING_MB", &C::staging_mb, 1, 65536,
                 "GPU staging ring per device in MiB (dma mode)"),
      EnumOption("completion-wait", "KVSTASH_COMPLETION_WAIT", &C::completion_wait,
                 kCompletionWaitNames,
                 "CUDA backend: how a copy lane waits for the GPU: block (sleep on a "
                 "blocking-sync event until the driver wakes the thread) or poll (sleep through "
                 "the shortest possible copy time, then check every few microseconds)"),
      EnumOption("multipath", "KVSTASH_MULTIPATH", &C::multipath, kMultipathNames,
                 "CUDA backend: on = a retrieve into one GPU, and a store out of it, may also "
                 "be carried by other GPUs that reach it over NVLink with peer access, each over "
                 "its own PCIe link, while their own queues of that direction are idle (the "
                 "default); off = every copy over its GPU's own link"),
      UintOption("multipath-staging-mb", "KVSTASH_MULTIPATH_STAGING_MB", &C::multipath_staging_mb,
                 2, 65536,
                 "GPU staging in MiB that each GPU keeps for the copies it carries for its "
                 "NVLink peers (dma mode, --multipath on), half for retrieves and half for "
                 "stores, so that the two directions never share a region: two pieces at least "
                 "per half, so that one goes over NVLink while the next lands"),
      UintOption("multipath-min-path-kib", "KVSTASH_MULTIPATH_MIN_PATH_KIB",
                 &C::multipath_min_path_kib, 0, 1 << 20,
                 "Fewest KiB a path carries in a multi-path retrieve or store: a smaller one "
                 "takes fewer paths (below twice this, one), whose fixed costs it would not "
                 "repay"),
      UintOption("multipath-piece-kib", "KVSTASH_MULTIPATH_PIECE_KIB", &C::multipath_piece_kib, 64,
                 1 << 20,
                 "KiB of the pieces a multi-path retrieve or store is cut into in dma mode (layer "
                 "ranges of large chunks, runs of whole small ones), every path taking the same "
                 "share of each: smaller pieces hide more of the NVLink hop and the kernel, larger "
                 "ones pay fewer copies' fixed costs; at most a quarter of --multipath-staging-mb"),
      UintOption("busy-poll-us", "KVSTASH_BUSY_POLL_US", &C::busy_poll_us, 0, 1000000,
                 "The spin window: microseconds the frontend and copy lanes keep polling on "
                 "a core after their last work (the frontend up to 20 windows while copies "
                 "are in flight) instead of sleeping; an idle daemon sleeps. 0 = never"),
      EnumOption("shm-channel", "KVSTASH_SHM_CHANNEL", &C::shm_channel, kShmChannelNames,
                 "Shared-memory request channel for clients on the ipc socket: on = a client "
                 "may attach rings in shared memory that carry its requests and replies "
                 "instead of ZeroMQ (docs/protocol.md \"Shared-memory channel\"), off = "
                 "ZeroMQ only"),
      OptionalStringOption("l2-path", "KVSTASH_L2_PATH", &C::l2_path,
                           "Directory of the L2 tier on local disk (one file per chunk); "
                           "empty = no L2"),
      FloatOption("l2-gb", "KVSTASH_L2_GB", &C::l2_gb, 0.001, 1048576,
                  "L2 capacity in GiB of disk space under --l2-path"),
      UintOption("l2-io-threads", "KVSTASH_L2_IO_THREADS", &C::l2_io_threads, 1, 256,
                 "Threads reading and writing L2 files (O_DIRECT) where io_uring is refused "
                 "(an old kernel, a container's seccomp profile); with io_uring two threads "
                 "keep 8 chunks in flight each"),
      EnumOption("tier-write", "KVSTASH_TIER_WRITE", &C::tier_write, kTierWriteNames,
                 "When a stored chunk is written to L2/L3: write-through = right after it "
                 "is stored (it survives a restart at once; eviction from L1 never waits), "
                 "on-eviction = only when L1 evicts it (less disk and Redis traffic)"),
      OptionalStringOption(
          "l3-redis", "KVSTASH_L3_REDIS", &C::l3_redis,
          "Redis or Valkey servers of the shared L3 tier, HOST:PORT[,HOST:PORT...]: "
          "seeds of a Redis Cluster, or shards; empty = no L3"),
      OptionalStringOption(
          "l3-user", "KVSTASH_L3_USER", &C::l3_user,
          "ACL user for AUTH on the L3 servers; empty = AUTH with the password alone"),
      SecretOption("l3-password", "KVSTASH_L3_PASSWORD", &C::l3_password,
                   "Password for AUTH on the L3 servers; empty = no AUTH. Prefer the "
                   "environment variable to the command line"),
      UintOption("l3-connect-timeout-ms", "KVSTASH_L3_CONNECT_TIMEOUT_MS",
                 &C::l3_connect_timeout_ms, 1, 600000,
                 "Timeout of a connection to an L3 server in milliseconds"),
      UintOption("l3-timeout-ms", "KVSTASH_L3_TIMEOUT_MS", &C::l3_timeout_ms, 1, 600000,
                 "Timeout of an L3 command (one pipelined batch's send or reply) in milliseconds"),
      UintOption("l3-io-threads", "KVSTASH_L3_IO_THREADS", &C::l3_io_threads, 1, 256,
                 "Threads talking to the L3 servers, each with its own connections"),
      UintOption("l3-part-mb", "KVSTASH_L3_PART_MB", &C::l3_part_mb, 1, 512,
                 "Largest value written to L3 in MiB; larger chunks are split into parts"),
      UintOption(
          "l3-ttl-s", "KVSTASH_L3_TTL_S", &C::l3_ttl_s, 0, 315360000,
          "Expiry of chunks written to L3 in seconds; 0 = none (let maxmemory-policy evict)"),
      UintOption("l3-breaker-failures", "KVSTASH_L3_BREAKER_FAILURES", &C::l3_breaker_failures, 1,
                 1000, "Failures in a row after which calls to an L3 server fail at once"),
      UintOption("l3-breaker-open-ms", "KVSTASH_L3_BREAKER_OPEN_MS", &C::l3_breaker_open_ms, 1,
                 3600000, "How long an L3 server's calls fail at once before one is tried again"),
      EnumOption("log-level", "KVSTASH_LOG_LEVEL", &C::log_level, kLogLevelNames, "Log level"),
      UintOption("metrics-port", "KVSTASH_METRICS_PORT", &C::metrics_port, 0, 65535,
                 "Prometheus metrics port; 0 = off"),
      StringOption("metrics-bind", "KVSTASH_METRICS_BIND", &C::metrics_bind,
                   "Address the metrics endpoint listens on"),
  };
}

// The shortest decimal text that reads back to the same double: 4 -> "4",
// 0.001 -> "0.001".
std::string FormatDouble(double value) {
  char buffer[32];
  for (int precision = 6; precision <= 17; ++precision) {
    std::snprintf(buffer, sizeof(buffer), "%.*g", precision, value);
    if (std::strtod(buffer, nullptr) == value) break;
  }
  return buffer;
}

std::string FormatUint(uint64_t value, bool octal) {
  char buffer[32];
  std::snprintf(buffer, sizeof(buffer), octal ? "%04llo" : "%llu",
                static_cast<unsigned long long>(value));
  return buffer;
}

std::string FormatNumber(const OptionSpec& option, double value) {
  if (std::holds_alternative<double ServerConfig::*>(option.member)) return FormatDouble(value);
  return FormatUint(static_cast<uint64_t>(value), option.octal);
}

std::string Quoted(std::string_view text) { return "'" + std::string(text) + "'"; }

Status OutOfRange(const OptionSpec& option, std::string_view text) {
  return Status::OutOfRange(option.flag() + " " + std::string(text) + " out of range " +
                            LimitsText(option));
}

Status ParseUint(const OptionSpec& option, std::string_view text, uint32_t* out) {
  const int base = option.octal ? 8 : 10;
  const bool digits_only =
      !text.empty() &&
      text.find_first_not_of(option.octal ? "01234567" : "0123456789") == std::string_view::npos;
  if (!digits_only) {
    return Status::InvalidArgument(option.flag() + " " + Quoted(text) + " is not " +
                                   (option.octal ? "an octal mode" : "an unsigned integer"));
  }
  const std::string copy(text);
  errno = 0;
  const unsigned long long value = std::strtoull(copy.c_str(), nullptr, base);
  if (errno == ERANGE || value < option.min || value > option.max) {
    return OutOfRange(option, text);
  }
  *out = static_cast<uint32_t>(value);
  return Status::Ok();
}

Status ParseDouble(const OptionSpec& option, std::string_view text, double* out) {
  const std::string copy(text);
  char* end = nullptr;
  errno = 0;
  const double value = copy.empty() ? 0 : std::strtod(copy.c_str(), &end);
  // Hexadecimal floats, "inf" and "nan" are valid to strtod but not here.
  const bool plain = copy.find_first_not_of("0123456789.eE+-") == std::string::npos;
  if (copy.empty() || end != copy.c_str() + copy.size() || !plain) {
    return Status::InvalidArgument(option.flag() + " " + Quoted(text) + " is not a number");
  }
  if (errno == ERANGE || !std::isfinite(value) || value < option.min || value > option.max) {
    return OutOfRange(option, text);
  }
  *out = value;
  return Status::Ok();
}

Status ParseString(const OptionSpec& option, std::string_view text, std::string* out) {
  if (text.empty() && option.allow_empty) {
    out->clear();
    return Status::Ok();
  }
  if (text.empty()) return Status::InvalidArgument(option.flag() + " must not be empty");
  if (!option.choices.empty()) {
    bool allowed = false;
    for (const std::string& choice : option.choices) allowed = allowed || choice == text;
    if (!allowed) {
      return Status::InvalidArgument(option.flag() + " " + Quoted(text) + " is not one of " +
                                     LimitsText(option));
    }
  }
  *out = std::string(text);
  return Status::Ok();
}

// Sets an enum member from its name (one of option.choices).
template <typename E>
Status ParseChoice(const OptionSpec& option, std::string_view text, E* out) {
  std::string name;
  Status status = ParseString(option, text, &name);
  if (!status.ok()) return status;
  for (size_t i = 0; i < option.choices.size(); ++i) {
    if (option.choices[i] == name) *out = E(i);
  }
  return Status::Ok();
}

// std::visit helper: one lambda per member type.
template <typename... F>
struct Overloaded : F... {
  using F::operator()...;
};
template <typename... F>
Overloaded(F...) -> Overloaded<F...>;

}  // namespace

const std::vector<OptionSpec>& OptionTable() {
  static const std::vector<OptionSpec> table = BuildTable();
  return table;
}

const OptionSpec* FindOption(std::string_view name) {
  std::string normalized(name);
  for (char& c : normalized) c = c == '_' ? '-' : c;
  for (const OptionSpec& option : OptionTable()) {
    if (option.name == normalized) return &option;
  }
  return nullptr;
}

std::string FormatValue(const OptionSpec& option, const ServerConfig& config) {
  return std::visit(
      Overloaded{
          [&](uint32_t ServerConfig::*m) { return FormatUint(config.*m, option.octal); },
          [&](double ServerConfig::*m) { return FormatDouble(config.*m); },
          [&](std::string ServerConfig::*m) { return config.*m; },
          [&](auto m) { return option.choices[size_t(config.*m)]; },  // an enum
      },
      option.member);
}

Status SetFromText(const OptionSpec& option, std::string_view text, ServerConfig* config) {
  return std::visit(
      Overloaded{
          [&](uint32_t ServerConfig::*m) { return ParseUint(option, text, &(config->*m)); },
          [&](double ServerConfig::*m) { return ParseDouble(option, text, &(config->*m)); },
          [&](std::string ServerConfig::*m) { return ParseString(option, text, &(config->*m)); },
          [&](auto m) { return ParseChoice(option, text, &(config->*m)); },  // an enum
      },
      option.member);
}

std::string TypeName(const OptionSpec& option) {
  if (option.octal) return "OCTAL";
  if (std::holds_alternative<uint32_t ServerConfig::*>(option.member)) return "UINT";
  if (std::holds_alternative<double ServerConfig::*>(option.member)) return "FLOAT";
  if (option.choices.empty()) return "TEXT";
  std::string text = "{";
  for (const std::string& choice : option.choices) {
    text += (text.size() > 1 ? "," : "") + choice;
  }
  return text + "}";
}

bool IsNumber(const OptionSpec& option) {
  return std::holds_alternative<uint32_t ServerConfig::*>(option.member) ||
         std::holds_alternative<double ServerConfig::*>(option.member);
}

std::string LimitsText(const OptionSpec& option) {
  if (IsNumber(option)) {
    return "[" + FormatNumber(option, option.min) + ", " + FormatNumber(option, option.max) + "]";
  }
  std::string text;
  for (const std::string& choice : option.choices) {
    text += (text.empty() ? "" : "|") + choice;
  }
  return text;
}

}  // namespace kvstash::config::internal
