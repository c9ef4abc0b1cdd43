// ParseServerConfig(): flags, KVSTASH_* variables, the config file, their
// precedence, the errors, --help, and the shipped example config.
#include "kvstash/config/server_config.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <cstdlib>
#include <fstream>
#include <map>
#include <sstream>

extern char** environ;

namespace kvstash::config {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string EnvName(const std::string& name) {
  std::string env = "KVSTASH_";
  for (char c : name) {
    env += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  }
  return env;
}

// Runs every test with no KVSTASH_* variable set, whatever the caller's
// environment holds, and restores it afterwards.
class ServerConfigTest : public ::testing::Test {
 protected:
  void SetUp() override {
    for (char** entry = environ; *entry != nullptr; ++entry) {
      const std::string text = *entry;
      if (text.rfind("KVSTASH_", 0) != 0) continue;
      const size_t eq = text.find('=');
      saved_[text.substr(0, eq)] = text.substr(eq + 1);
    }
    for (const auto& [name, value] : saved_) unsetenv(name.c_str());
  }

  void TearDown() override {
    for (const std::string& name : set_) unsetenv(name.c_str());
    for (const auto& [name, value] : saved_) setenv(name.c_str(), value.c_str(), 1);
  }

  void SetEnv(const std::string& name, const std::string& value) {
    setenv(name.c_str(), value.c_str(), 1);
    set_.push_back(name);
  }

  std::string WriteFile(const std::string& text) {
    const std::string path = ::testing::TempDir() + "kvstash_config_test_" +
                             ::testing::UnitTest::GetInstance()->current_test_info()->name() +
                             std::to_string(files_++) + ".conf";
    std::ofstream(path) << text;
    return path;
  }

  static ParseOutcome Parse(std::vector<std::string> args) {
    args.insert(args.begin(), "kvstashd");
    std::vector<const char*> argv;
    for (const std::string& arg : args) argv.push_back(arg.c_str());
    return ParseServerConfig(static_cast<int>(argv.size()), argv.data());
  }

  // Parses and expects success.
  static ServerConfig ParseOk(std::vector<std::string> args) {
    ParseOutcome outcome = Parse(std::move(args));
    EXPECT_FALSE(outcome.should_exit) << outcome.output;
    return outcome.config;
  }

  // Parses and expects a usage error; returns its text.
  static std::string ParseError(std::vector<std::string> args) {
    ParseOutcome outcome = Parse(std::move(args));
    EXPECT_TRUE(outcome.should_exit);
    EXPECT_EQ(outcome.exit_code, kUsageExitCode);
    return outcome.output;
  }

 private:
  std::map<std::string, std::string> saved_;
  std::vector<std::string> set_;
  int files_ = 0;
};

TEST_F(ServerConfigTest, NoArgumentsGiveTheStructDefaults) {
  const ServerConfig config = ParseOk({});
  EXPECT_EQ(EffectiveConfig(config), EffectiveConfig(ServerConfig{}));
  EXPECT_EQ(config.socket, "ipc:///run/kvstash/kvstash.sock");
  EXPECT_EQ(config.socket_mode, 0660u);
  EXPECT_EQ(config.l1_gb, 4.0);
}

TEST_F(ServerConfigTest, FlagsSetEveryKindOfOption) {
  const ServerConfig config = ParseOk({"--socket", "ipc:///tmp/k.sock", "--socket-mode", "0600",
                                       "--backend", "host", "--l1-gb", "0.5", "--chunk-tokens",
                                       "128", "--metrics-port=9464", "--log-level", "debug"});
  EXPECT_EQ(config.socket, "ipc:///tmp/k.sock");
  EXPECT_EQ(config.socket_mode, 0600u);
  EXPECT_EQ(config.backend, BackendKind::kHost);
  EXPECT_EQ(config.l1_gb, 0.5);
  EXPECT_EQ(config.chunk_tokens, 128u);
  EXPECT_EQ(config.metrics_port, 9464u);
  EXPECT_EQ(config.log_level, LogLevel::kDebug);
  EXPECT_EQ(config.lease_ms, ServerConfig().lease_ms);
}

TEST_F(ServerConfigTest, LaterFlagOverridesEarlierOne) {
  EXPECT_EQ(ParseOk({"--l1-gb", "1", "--l1-gb", "2"}).l1_gb, 2.0);
}

TEST_F(ServerConfigTest, SocketModeIsOctalWithOrWithoutLeadingZero) {
  EXPECT_EQ(ParseOk({"--socket-mode", "660"}).socket_mode, 0660u);
  EXPECT_EQ(ParseOk({"--socket-mode", "0666"}).socket_mode, 0666u);
}

TEST_F(ServerConfigTest, EnvironmentVariablesSetOptions) {
  SetEnv("KVSTASH_L1_GB", "16");
  SetEnv("KVSTASH_BACKEND", "cuda");
  SetEnv("KVSTASH_SOCKET_MODE", "0666");
  SetEnv("KVSTASH_METRICS_BIND", "0.0.0.0");
  const ServerConfig config = ParseOk({});
  EXPECT_EQ(config.l1_gb, 16.0);
  EXPECT_EQ(config.backend, BackendKind::kCuda);
  EXPECT_EQ(config.socket_mode, 0666u);
  EXPECT_EQ(config.metrics_bind, "0.0.0.0");
}

TEST_F(ServerConfigTest, EmptyEnvironmentVariableLeavesTheDefault) {
  SetEnv("KVSTASH_L1_GB", "");
  EXPECT_EQ(ParseOk({}).l1_gb, ServerConfig().l1_gb);
}

TEST_F(ServerConfigTest, ConfigFileSetsOptions) {
  const std::string path = WriteFile(
      "# comment\n"
      "l1-gb = 32   # trailing comment\n"
      "socket = \"tcp://127.0.0.1:5555\"\n"
      "transfer_mode = direct\n"
      "socket-mode = 0600\n");
  const ServerConfig config = ParseOk({"--config", path});
  EXPECT_EQ(config.l1_gb, 32.0);
  EXPECT_EQ(config.socket, "tcp://127.0.0.1:5555");
  EXPECT_EQ(config.transfer_mode, TransferMode::kDirect);
  EXPECT_EQ(config.socket_mode, 0600u);
}

TEST_F(ServerConfigTest, ConfigFileNamedByEnvironment) {
  SetEnv("KVSTASH_CONFIG", WriteFile("chunk-tokens = 64\n"));
  EXPECT_EQ(ParseOk({}).chunk_tokens, 64u);
}

TEST_F(ServerConfigTest, FlagsBeatEnvironmentWhichBeatsFileWhichBeatsDefaults) {
  SetEnv("KVSTASH_CONFIG", WriteFile("l1-gb = 1\nchunk-tokens = 64\nlease-ms = 5\n"));
  SetEnv("KVSTASH_L1_GB", "2");
  SetEnv("KVSTASH_CHUNK_TOKENS", "32");
  const ServerConfig config = ParseOk({"--l1-gb", "3"});
  EXPECT_EQ(config.l1_gb, 3.0);         // flag
  EXPECT_EQ(config.chunk_tokens, 32u);  // environment over file
  EXPECT_EQ(config.lease_ms, 5u);       // file over default
  EXPECT_EQ(config.staging_mb, 256u);   // default
}

TEST_F(ServerConfigTest, OutOfRangeFlagNamesFlagValueAndBounds) {
  EXPECT_THAT(ParseError({"--l1-gb", "0"}), HasSubstr("--l1-gb 0 out of range [0.001, 65536]"));
  EXPECT_THAT(ParseError({"--l1-gb", "-1"}), HasSubstr("--l1-gb"));
  EXPECT_THAT(ParseError({"--metrics-port", "65536"}),
              HasSubstr("--metrics-port 65536 out of range [0, 65535]"));
  EXPECT_THAT(ParseError({"--chunk-tokens", "0"}),
              HasSubstr("--chunk-tokens 0 out of range [1, 65536]"));
  EXPECT_THAT(ParseError({"--socket-mode", "1000"}),
              HasSubstr("--socket-mode 1000 out of range [0000, 0777]"));
  EXPECT_THAT(ParseError({"--chunk-tokens", "many"}),
              HasSubstr("--chunk-tokens 'many' is not an unsigned integer"));
}

TEST_F(ServerConfigTest, ErrorsSayWhichVariableOrFileGaveTheValue) {
  SetEnv("KVSTASH_L1_GB", "0");
  EXPECT_THAT(ParseError({}),
              HasSubstr("--l1-gb 0 out of range [0.001, 65536] (from KVSTASH_L1_GB)"));
  const std::string path = WriteFile("lease-ms = 0\n");
  EXPECT_THAT(ParseError({"--config", path, "--l1-gb", "1"}),
              HasSubstr("--lease-ms 0 out of range [1, 3600000] (from " + path + ")"));
}

TEST_F(ServerConfigTest, FlagErrorsDoNotClaimAnotherSource) {
  SetEnv("KVSTASH_L1_GB", "8");
  EXPECT_THAT(ParseError({"--l1-gb", "0"}), Not(HasSubstr("(from")));
}

TEST_F(ServerConfigTest, EnumerationsAcceptOnlyTheirValues) {
  EXPECT_THAT(ParseError({"--backend", "gpu"}),
              HasSubstr("--backend 'gpu' is not one of auto|host|cuda"));
  EXPECT_THAT(ParseError({"--transfer-mode", "DMA"}),
              HasSubstr("--transfer-mode 'DMA' is not one of dma|direct"));
  EXPECT_THAT(ParseError({"--log-level", "verbose"}),
              HasSubstr("is not one of trace|debug|info|warn|error|off"));
}

TEST_F(ServerConfigTest, ChoicesAreParsedOnceIntoTheirEnumsFromEverySource) {
  SetEnv("KVSTASH_TIER_WRITE", "on-eviction");
  const ServerConfig config =
      ParseOk({"--config", WriteFile("shm-channel = off\n"), "--multipath", "off"});
  EXPECT_EQ(config.multipath, Multipath::kOff);
  EXPECT_EQ(config.shm_channel, ShmChannel::kOff);
  EXPECT_EQ(config.tier_write, TierWrite::kOnEviction);
  EXPECT_EQ(config.log_level, LogLevel::kInfo);
  std::map<std::string, std::string> shown;
  for (const auto& [name, value] : EffectiveConfig(config)) shown[name] = value;
  EXPECT_EQ(shown["multipath"], "off");
  EXPECT_EQ(shown["shm-channel"], "off");
  EXPECT_EQ(shown["tier-write"], "on-eviction");
  EXPECT_EQ(shown["log-level"], "info");
}

TEST_F(ServerConfigTest, BadChoicesNameTheValueAndEveryChoice) {
  EXPECT_THAT(ParseError({"--multipath", "yes"}),
              HasSubstr("--multipath 'yes' is not one of off|on"));
  EXPECT_THAT(ParseError({"--shm-channel", "ON"}),
              HasSubstr("--shm-channel 'ON' is not one of on|off"));
  EXPECT_THAT(ParseError({"--tier-write", "later"}),
              HasSubstr("--tier-write 'later' is not one of write-through|on-eviction"));
}

TEST_F(ServerConfigTest, UnknownFlagIsAnError) {
  EXPECT_THAT(ParseError({"--l1-gib", "4"}), HasSubstr("--l1-gib"));
  EXPECT_THAT(ParseError({"stray"}), HasSubstr("stray"));
}

TEST_F(ServerConfigTest, BadConfigFilesAreErrors) {
  EXPECT_THAT(ParseError({"--config", WriteFile("l1-gib = 4\n")}),
              HasSubstr("unknown key 'l1-gib'"));
  EXPECT_THAT(ParseError({"--config", WriteFile("[server]\nl1-gb = 4\n")}),
              HasSubstr("sections are not supported"));
  EXPECT_THAT(ParseError({"--config", WriteFile("l1-gb = 4\nsocket = x\nl1-gb = 5\n")}),
              HasSubstr("key 'l1-gb' must be given exactly one value, once"));
  EXPECT_THAT(ParseError({"--config", WriteFile("backend = [host, cuda]\n")}),
              HasSubstr("key 'backend' must be given exactly one value"));
  EXPECT_THAT(ParseError({"--config", "/nonexistent/kvstash.conf"}),
              HasSubstr("config file /nonexistent/kvstash.conf"));
}

TEST_F(ServerConfigTest, HelpListsEveryOptionWithItsVariableAndDefault) {
  const ParseOutcome outcome = Parse({"--help"});
  ASSERT_TRUE(outcome.should_exit);
  EXPECT_EQ(outcome.exit_code, 0);
  for (const auto& [name, value] : EffectiveConfig(ServerConfig{})) {
    EXPECT_THAT(outcome.output, HasSubstr("--" + name + " ")) << name;
    EXPECT_THAT(outcome.output, HasSubstr("Env:" + EnvName(name))) << name;
    EXPECT_THAT(outcome.output, HasSubstr("=" + value)) << name;
  }
  EXPECT_THAT(outcome.output, HasSubstr("--config"));
  EXPECT_THAT(outcome.output, HasSubstr("Env:KVSTASH_CONFIG"));
  EXPECT_THAT(outcome.output, HasSubstr("[0.001, 65536]"));
  EXPECT_THAT(outcome.output, HasSubstr("{auto,host,cuda}"));
}

TEST_F(ServerConfigTest, HelpWinsOverBadValues) {
  SetEnv("KVSTASH_L1_GB", "0");
  const ParseOutcome outcome = Parse({"--help"});
  EXPECT_TRUE(outcome.should_exit);
  EXPECT_EQ(outcome.exit_code, 0);
}

TEST_F(ServerConfigTest, VersionPrintsTheProjectVersion) {
  const ParseOutcome outcome = Parse({"--version"});
  EXPECT_TRUE(outcome.should_exit);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_THAT(outcome.output, HasSubstr("kvstashd 0."));
}

TEST_F(ServerConfigTest, EffectiveConfigListsTableOrderWithModeInOctal) {
  const auto pairs = EffectiveConfig(ServerConfig{});
  ASSERT_GE(pairs.size(), 3u);
  EXPECT_EQ(pairs[0],
            std::make_pair(std::string("socket"), std::string("ipc:///run/kvstash/kvstash.sock")));
  EXPECT_EQ(pairs[1], std::make_pair(std::string("socket-mode"), std::string("0660")));
  const std::map<std::string, std::string> by_name(pairs.begin(), pairs.end());
  EXPECT_EQ(by_name.size(), pairs.size());
  EXPECT_EQ(by_name.at("l1-gb"), "4");
}

TEST_F(ServerConfigTest, EffectiveConfigValuesAreTypedNumbersOrText) {
  const ServerConfig config = ParseOk({"--l1-gb", "0.5", "--chunk-tokens", "64"});
  std::map<std::string, ConfigValue> by_name;
  for (const auto& [name, value] : EffectiveConfigValues(config)) by_name[name] = value;
  EXPECT_EQ(by_name.size(), EffectiveConfig(config).size());
  EXPECT_EQ(by_name.at("chunk-tokens"), ConfigValue(uint64_t{64}));
  EXPECT_EQ(by_name.at("l1-gb"), ConfigValue(0.5));
  EXPECT_EQ(by_name.at("backend"), ConfigValue(std::string("auto")));
  // A file mode keeps its octal spelling.
  EXPECT_EQ(by_name.at("socket-mode"), ConfigValue(std::string("0660")));
}

TEST_F(ServerConfigTest, EffectiveConfigWrittenAsFileReadsBackTheSame) {
  const ServerConfig changed = ParseOk({"--l1-gb", "0.3", "--socket-mode", "0600", "--backend",
                                        "host", "--socket", "ipc:///tmp/a b.sock"});
  std::ostringstream file;
  for (const auto& [name, value] : EffectiveConfig(changed)) {
    file << name << " = \"" << value << "\"\n";
  }
  EXPECT_EQ(EffectiveConfig(ParseOk({"--config", WriteFile(file.str())})),
            EffectiveConfig(changed));
}

TEST_F(ServerConfigTest, PrintConfigWritesTheEffectiveConfigAsAConfigFile) {
  SetEnv("KVSTASH_BACKEND", "host");
  const ParseOutcome outcome = Parse({"--l1-gb", "8", "--print-config"});
  ASSERT_TRUE(outcome.should_exit);
  EXPECT_EQ(outcome.exit_code, 0);
  EXPECT_THAT(outcome.output, HasSubstr("socket = \"ipc:///run/kvstash/kvstash.sock\"\n"));
  EXPECT_THAT(outcome.output, HasSubstr("socket-mode = 0660\n"));
  EXPECT_THAT(outcome.output, HasSubstr("backend = \"host\"\n"));
  EXPECT_THAT(outcome.output, HasSubstr("l1-gb = 8\n"));
  unsetenv("KVSTASH_BACKEND");
  const ServerConfig reread = ParseOk({"--config", WriteFile(outcome.output)});
  EXPECT_EQ(reread.l1_gb, 8.0);
  EXPECT_EQ(reread.backend, BackendKind::kHost);
}

TEST_F(ServerConfigTest, PrintConfigReportsBadValuesInstead) {
  EXPECT_THAT(ParseError({"--print-config", "--backend", "gpu"}), HasSubstr("--backend 'gpu'"));
}

// The shipped example must list every option at its default: then neither
// the file nor the defaults can drift apart unnoticed.
TEST_F(ServerConfigTest, ExampleConfigParsesToTheDefaults) {
  const ParseOutcome outcome = Parse({"--config", KVSTASH_EXAMPLE_CONFIG});
  ASSERT_FALSE(outcome.should_exit) << outcome.output;
  EXPECT_EQ(EffectiveConfig(outcome.config), EffectiveConfig(ServerConfig{}));
}

TEST_F(ServerConfigTest, ExampleConfigSetsEveryKeyWithItsVariableDocumented) {
  std::ifstream in(KVSTASH_EXAMPLE_CONFIG);
  ASSERT_TRUE(in) << KVSTASH_EXAMPLE_CONFIG;
  std::map<std::string, int> keys;
  std::string text;
  for (std::string line; std::getline(in, line);) {
    text += line + "\n";
    if (line.empty() || line[0] == '#') continue;
    ++keys[line.substr(0, line.find_first_of(" ="))];
  }
  for (const auto& [name, value] : EffectiveConfig(ServerConfig{})) {
    EXPECT_EQ(keys[name], 1) << name << " must be set exactly once";
    EXPECT_THAT(text, HasSubstr("# Env: " + EnvName(name))) << name;
  }
}

TEST_F(ServerConfigTest, TierOptionsComeFromFlagsEnvironmentAndFile) {
  SetEnv("KVSTASH_L3_PASSWORD", "s3cret");
  const std::string file = WriteFile("l2-gb = 128\nl3-redis = \"r1:6379,r2:6379\"\n");
  const ServerConfig config = ParseOk({"--config", file, "--l2-path", "/var/lib/kvstash/l2"});
  EXPECT_EQ(config.l2_path, "/var/lib/kvstash/l2");
  EXPECT_EQ(config.l2_gb, 128.0);
  EXPECT_EQ(config.l3_redis, "r1:6379,r2:6379");
  EXPECT_EQ(config.l3_password, "s3cret");
  // An empty path turns a tier off again; other strings may not be empty.
  EXPECT_EQ(ParseOk({"--l2-path", "/x", "--l2-path", ""}).l2_path, "");
  EXPECT_THAT(ParseError({"--socket", ""}), HasSubstr("--socket must not be empty"));
  EXPECT_THAT(ParseError({"--l3-part-mb", "513"}),
              HasSubstr("--l3-part-mb 513 out of range [1, 512]"));
}

TEST_F(ServerConfigTest, EffectiveConfigNeverShowsThePassword) {
  ServerConfig config;
  config.l3_password = "s3cret";
  for (const auto& [name, value] : EffectiveConfig(config)) {
    EXPECT_EQ(value.find("s3cret"), std::string::npos) << name;
    if (name == "l3-password") {
      EXPECT_EQ(value, "(set)");
    }
  }
}

}  // namespace
}  // namespace kvstash::config
