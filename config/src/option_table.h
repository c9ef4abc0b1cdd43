// The option table: every daemon option declared once (name, environment
// variable, ServerConfig member, bounds, help), and the conversions between
// an option's text form and its member. Internal to kvstash::config; the
// public surface is kvstash/config/server_config.h.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "kvstash/config/server_config.h"
#include "kvstash/status.h"

namespace kvstash::config::internal {

// The ServerConfig member an option sets. The member's type is the option's
// type; its default initializer is the option's default.
using Member =
    std::variant<uint32_t ServerConfig::*, double ServerConfig::*, std::string ServerConfig::*,
                 BackendKind ServerConfig::*, TransferMode ServerConfig::*,
                 CompletionWait ServerConfig::*, Multipath ServerConfig::*,
                 ShmChannel ServerConfig::*, TierWrite ServerConfig::*, LogLevel ServerConfig::*>;

struct OptionSpec {
  std::string name;  // "l1-gb": the flag is --l1-gb, the config-file key l1-gb
  std::string env;   // "KVSTASH_L1_GB"
  Member member;
  std::string help;
  // Numbers: inclusive bounds. Unused for strings.
  double min = 0;
  double max = 0;
  // Strings: the allowed values; empty allows any non-empty text. Enums:
  // their names, in enum order.
  std::vector<std::string> choices;
  // Unsigned values read and shown in octal (file modes: "0660").
  bool octal = false;
  // Strings: "" is allowed and means the feature is off (--l2-path).
  bool allow_empty = false;
  // A password: EffectiveConfig() shows "(set)" instead of the value.
  bool secret = false;

  std::string flag() const { return "--" + name; }
};

// A number (uint32_t or double member), rather than text or a choice.
bool IsNumber(const OptionSpec& option);

// The table, in the order --help and EffectiveConfig() list it.
const std::vector<OptionSpec>& OptionTable();

// The option whose name is `name` ("l1-gb"; "l1_gb" is accepted too, as
// config-file keys often use underscores), or nullptr.
const OptionSpec* FindOption(std::string_view name);

// The member's value as text, in the form SetFromText() reads back:
// "4", "0660", "ipc:///run/kvstash/kvstash.sock".
std::string FormatValue(const OptionSpec& option, const ServerConfig& config);

// Parses `text`, checks it against the option's bounds or choices and
// stores it. Errors name the flag, the value and the limit:
// "--l1-gb 0 out of range [0.001, 65536]".
Status SetFromText(const OptionSpec& option, std::string_view text, ServerConfig* config);

// The value placeholder for --help: "UINT", "FLOAT", "OCTAL", "TEXT" or
// "{auto,host,cuda}".
std::string TypeName(const OptionSpec& option);

// The limits as text for help and error messages: "[1, 65536]",
// "auto|host|cuda", or "" when any non-empty text is allowed.
std::string LimitsText(const OptionSpec& option);

}  // namespace kvstash::config::internal
