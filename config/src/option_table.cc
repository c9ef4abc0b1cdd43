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

OptionSpec FloatOption(std::string name, std::string env, double ServerConfig::*member,
                       double min, double max, std::string help) {
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

OptionSpec EnumOption(std::string name, std::string env, std::string ServerConfig::*member,
                      std::vector<std::string> choices, std::string help) {
  OptionSpec spec = StringOption(std::move(name), std::move(env), member, std::move(help));
  spec.choices = std::move(choices);
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
      EnumOption("backend", "KVSTASH_BACKEND", &C::backend, {"auto", "host", "cuda"},
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
      UintOption("copy-threads", "KVSTASH_COPY_THREADS", &C::copy_threads, 0, kMaxThreads,
                 "Threads for host-side copies; 0 = one per core"),
      UintOption("pin-threads", "KVSTASH_PIN_THREADS", &C::pin_threads, 0, kMaxThreads,
                 "Threads pinning the pool in the background; 0 = one per core"),
      EnumOption("transfer-mode", "KVSTASH_TRANSFER_MODE", &C::transfer_mode, {"dma", "direct"},
                 "CUDA backend: dma (gather into GPU staging, copy engines) or direct "
                 "(kernels access pinned host memory)"),
      UintOption("staging-mb", "KVSTASH_STAGING_MB", &C::staging_mb, 1, 65536,
                 "GPU staging ring per device in MiB (dma mode)"),
      EnumOption("completion-wait", "KVSTASH_COMPLETION_WAIT", &C::completion_wait,
                 {"block", "poll"},
                 "CUDA backend: how a copy lane waits for the GPU: block (sleep on a "
                 "blocking-sync event until the driver wakes the thread) or poll (sleep through "
                 "the shortest possible copy time, then check every few microseconds)"),
      UintOption("busy-poll-us", "KVSTASH_BUSY_POLL_US", &C::busy_poll_us, 0, 1000000,
                 "Microseconds the frontend and copy lanes keep polling on a core after "
                 "their last work (and while copies are in flight) instead of sleeping; "
                 "0 = never"),
      EnumOption("log-level", "KVSTASH_LOG_LEVEL", &C::log_level,
                 {"trace", "debug", "info", "warn", "error", "off"}, "Log level"),
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
      !text.empty() && text.find_first_not_of(option.octal ? "01234567" : "0123456789") ==
                           std::string_view::npos;
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
      },
      option.member);
}

Status SetFromText(const OptionSpec& option, std::string_view text, ServerConfig* config) {
  return std::visit(
      Overloaded{
          [&](uint32_t ServerConfig::*m) { return ParseUint(option, text, &(config->*m)); },
          [&](double ServerConfig::*m) { return ParseDouble(option, text, &(config->*m)); },
          [&](std::string ServerConfig::*m) { return ParseString(option, text, &(config->*m)); },
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

std::string LimitsText(const OptionSpec& option) {
  if (!std::holds_alternative<std::string ServerConfig::*>(option.member)) {
    return "[" + FormatNumber(option, option.min) + ", " + FormatNumber(option, option.max) + "]";
  }
  std::string text;
  for (const std::string& choice : option.choices) {
    text += (text.empty() ? "" : "|") + choice;
  }
  return text;
}

}  // namespace kvstash::config::internal
