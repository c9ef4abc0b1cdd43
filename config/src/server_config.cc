// ParseServerConfig() and EffectiveConfig(): the option table turned into a
// CLI11 command line, a config file and KVSTASH_* variables, layered as
// flags > environment > config file > defaults.
#include "kvstash/config/server_config.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <optional>
#include <set>

#include "option_table.h"

#ifndef KVSTASH_VERSION
#define KVSTASH_VERSION "unknown"
#endif

namespace kvstash::config {
namespace {

using internal::OptionSpec;
using internal::OptionTable;

// A value from the config file for one option.
struct FileValue {
  const OptionSpec* option;
  std::string text;
};

ParseOutcome Exit(int code, std::string output) {
  ParseOutcome outcome;
  outcome.should_exit = true;
  outcome.exit_code = code;
  outcome.output = std::move(output);
  return outcome;
}

ParseOutcome UsageError(const std::string& message) {
  return Exit(kUsageExitCode, message + "\nRun with --help for more information.\n");
}

// Reads `key = value` lines with CLI11's TOML-style reader. Keys are the
// option names without "--". Sections, repeated keys, several values for one
// key and keys no option has are errors: a typo must not be ignored.
Result<std::vector<FileValue>> ReadConfigFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return Status::NotFound("config file " + path + ": " + std::strerror(errno));
  }
  std::vector<CLI::ConfigItem> items;
  try {
    items = CLI::ConfigTOML().from_config(in);
  } catch (const CLI::Error& e) {
    return Status::InvalidArgument("config file " + path + ": " + e.what());
  }
  std::vector<FileValue> values;
  std::set<const OptionSpec*> seen;
  for (const CLI::ConfigItem& item : items) {
    if (!item.parents.empty()) {
      return Status::InvalidArgument("config file " + path + ": sections are not supported ([" +
                                     item.parents.front() + "]); write keys at the top level");
    }
    const OptionSpec* option = internal::FindOption(item.name);
    if (option == nullptr) {
      return Status::InvalidArgument("config file " + path + ": unknown key '" + item.name + "'");
    }
    if (item.inputs.size() != 1 || !seen.insert(option).second) {
      return Status::InvalidArgument("config file " + path + ": key '" + item.name +
                                     "' must be given exactly one value, once");
    }
    values.push_back({option, item.inputs.front()});
  }
  return values;
}

// CLI11 does not say whether a value came from argv or the environment;
// error messages do, so look for the flag itself.
bool OnCommandLine(const std::string& flag, int argc, const char* const* argv) {
  for (int i = 1; i < argc; ++i) {
    const std::string_view arg = argv[i];
    if (arg == flag || arg.substr(0, flag.size() + 1) == flag + "=") return true;
  }
  return false;
}

// `key = value` lines that --config reads back; strings are quoted.
std::string ConfigFileText(const ServerConfig& config) {
  std::string text;
  for (const OptionSpec& option : OptionTable()) {
    const std::string value = internal::FormatValue(option, config);
    const bool quote = !internal::IsNumber(option);
    text += option.name + " = " + (quote ? "\"" + value + "\"" : value) + "\n";
  }
  return text;
}

}  // namespace

ParseOutcome ParseServerConfig(int argc, const char* const* argv) {
  const std::vector<OptionSpec>& table = OptionTable();
  const ServerConfig defaults;

  CLI::App app("kvstashd: KV-cache offload daemon for LLM inference engines", "kvstashd");
  app.set_version_flag("--version", "kvstashd " KVSTASH_VERSION);
  app.footer(
      "Precedence: flags > KVSTASH_* environment > config file > defaults.\n"
      "Config file: one `key = value` per line, keys named as the flags without '--'\n"
      "(see kvstash.conf.example).");

  // CLI11 2.1 applies a config file *before* the environment (so a file
  // would beat KVSTASH_*) and ignores an envname on its config option, so
  // --config is a plain option here and the file is layered below.
  std::string config_path;
  app.add_option("--config", config_path, "Config file of `key = value` lines")
      ->envname("KVSTASH_CONFIG")
      ->type_name("FILE");
  bool print_config = false;
  app.add_flag("--print-config", print_config,
               "Print the effective configuration as config-file lines and exit");

  // Each option is captured as text and converted by the table, which owns
  // parsing, bounds and their messages.
  std::vector<std::string> texts(table.size());
  std::vector<CLI::Option*> cli_options(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    const OptionSpec& option = table[i];
    std::string help = option.help;
    if (internal::IsNumber(option)) {
      help += ". Range " + internal::LimitsText(option);
    }
    cli_options[i] = app.add_option(option.flag(), texts[i], help)
                         ->envname(option.env)
                         ->type_name(internal::TypeName(option))
                         ->default_str(internal::FormatValue(option, defaults))
                         // A later flag overrides an earlier one, so wrappers
                         // can append to a command line.
                         ->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  }

  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp&) {
    return Exit(0, app.help());
  } catch (const CLI::CallForAllHelp&) {
    return Exit(0, app.help("", CLI::AppFormatMode::All));
  } catch (const CLI::CallForVersion& e) {
    return Exit(0, std::string(e.what()) + "\n");
  } catch (const CLI::ParseError& e) {
    return UsageError(e.what());
  }

  // Where each option's text came from: nullopt = not given (the default
  // stands), "" = a flag, otherwise the variable or file named.
  std::vector<std::optional<std::string>> sources(table.size());
  for (size_t i = 0; i < table.size(); ++i) {
    if (cli_options[i]->count() == 0) continue;
    sources[i] = OnCommandLine(table[i].flag(), argc, argv) ? "" : table[i].env;
  }
  if (!config_path.empty()) {
    Result<std::vector<FileValue>> file = ReadConfigFile(config_path);
    if (!file.ok()) return UsageError(file.status().message());
    for (const FileValue& value : *file) {
      const size_t i = static_cast<size_t>(value.option - table.data());
      if (sources[i]) continue;  // a flag or the environment wins
      texts[i] = value.text;
      sources[i] = config_path;
    }
  }

  ParseOutcome outcome;
  for (size_t i = 0; i < table.size(); ++i) {
    if (!sources[i]) continue;
    Status status = internal::SetFromText(table[i], texts[i], &outcome.config);
    if (!status.ok()) {
      return UsageError(status.message() +
                        (sources[i]->empty() ? "" : " (from " + *sources[i] + ")"));
    }
  }
  if (print_config) return Exit(0, ConfigFileText(outcome.config));
  return outcome;
}

std::vector<std::pair<std::string, std::string>> EffectiveConfig(const ServerConfig& config) {
  std::vector<std::pair<std::string, std::string>> pairs;
  for (const OptionSpec& option : OptionTable()) {
    std::string value = internal::FormatValue(option, config);
    if (option.secret && !value.empty()) value = "(set)";
    pairs.emplace_back(option.name, std::move(value));
  }
  return pairs;
}

std::vector<std::pair<std::string, ConfigValue>> EffectiveConfigValues(const ServerConfig& config) {
  std::vector<std::pair<std::string, ConfigValue>> values;
  for (const auto& [name, text] : EffectiveConfig(config)) {
    const OptionSpec& option = *internal::FindOption(name);
    ConfigValue value = text;
    if (const auto* m = std::get_if<uint32_t ServerConfig::*>(&option.member); m && !option.octal) {
      value = uint64_t{config.*(*m)};
    } else if (const auto* d = std::get_if<double ServerConfig::*>(&option.member)) {
      value = config.*(*d);
    }
    values.emplace_back(name, std::move(value));
  }
  return values;
}

}  // namespace kvstash::config
