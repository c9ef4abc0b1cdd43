// The option table's own invariants: one entry per member, names that follow
// the conventions, defaults that satisfy their own bounds, and text forms
// that read back to the same value.
#include "option_table.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cctype>
#include <set>

namespace kvstash::config::internal {
namespace {

using ::testing::HasSubstr;

TEST(OptionTable, NamesVariablesAndMembersAreUnique) {
  std::set<std::string> names;
  std::set<std::string> envs;
  std::vector<Member> members;
  for (const OptionSpec& option : OptionTable()) {
    EXPECT_TRUE(names.insert(option.name).second) << option.name;
    EXPECT_TRUE(envs.insert(option.env).second) << option.env;
    for (const Member& seen : members) EXPECT_FALSE(seen == option.member) << option.name;
    members.push_back(option.member);
  }
}

TEST(OptionTable, EnvironmentVariableIsKvstashPlusUpperCaseName) {
  for (const OptionSpec& option : OptionTable()) {
    std::string expected = "KVSTASH_";
    for (char c : option.name) {
      expected += c == '-' ? '_' : static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
    }
    EXPECT_EQ(option.env, expected);
    EXPECT_FALSE(option.help.empty()) << option.name;
  }
}

TEST(OptionTable, EveryDefaultReadsBackToItselfWithinItsBounds) {
  const ServerConfig defaults;
  for (const OptionSpec& option : OptionTable()) {
    const std::string text = FormatValue(option, defaults);
    ServerConfig parsed;
    ASSERT_TRUE(SetFromText(option, text, &parsed).ok()) << option.name << " = " << text;
    EXPECT_EQ(FormatValue(option, parsed), text) << option.name;
  }
}

TEST(OptionTable, FindsOptionsByDashOrUnderscoreName) {
  ASSERT_NE(FindOption("l1-gb"), nullptr);
  EXPECT_EQ(FindOption("l1_gb"), FindOption("l1-gb"));
  EXPECT_EQ(FindOption("l1-gib"), nullptr);
}

TEST(OptionTable, FormatsDoublesShortestAndModesInOctal) {
  ServerConfig config;
  config.l1_gb = 0.1;
  config.socket_mode = 0600;
  EXPECT_EQ(FormatValue(*FindOption("l1-gb"), config), "0.1");
  EXPECT_EQ(FormatValue(*FindOption("socket-mode"), config), "0600");
  config.l1_gb = 1.0 / 3.0;
  ServerConfig parsed;
  ASSERT_TRUE(
      SetFromText(*FindOption("l1-gb"), FormatValue(*FindOption("l1-gb"), config), &parsed).ok());
  EXPECT_EQ(parsed.l1_gb, config.l1_gb);
}

TEST(OptionTable, RejectsTextThatIsNotOfTheOptionsType) {
  ServerConfig config;
  const OptionSpec& tokens = *FindOption("chunk-tokens");
  for (const char* bad : {"", "-1", "+1", "1.5", "0x10", " 1", "abc"}) {
    Status status = SetFromText(tokens, bad, &config);
    EXPECT_EQ(status.code(), StatusCode::kInvalidArgument) << bad;
    EXPECT_THAT(status.message(), HasSubstr("is not an unsigned integer")) << bad;
  }
  const OptionSpec& gb = *FindOption("l1-gb");
  for (const char* bad : {"", "nan", "inf", "0x1p3", "4GB", "4 "}) {
    EXPECT_THAT(SetFromText(gb, bad, &config).message(), HasSubstr("is not a number")) << bad;
  }
  EXPECT_THAT(SetFromText(*FindOption("socket-mode"), "0668", &config).message(),
              HasSubstr("is not an octal mode"));
  EXPECT_THAT(SetFromText(*FindOption("socket"), "", &config).message(),
              HasSubstr("--socket must not be empty"));
}

TEST(OptionTable, OverflowIsOutOfRangeNotWrapped) {
  ServerConfig config;
  Status status = SetFromText(*FindOption("lease-ms"), "99999999999999999999999", &config);
  EXPECT_EQ(status.code(), StatusCode::kOutOfRange);
  EXPECT_EQ(status.message(), "--lease-ms 99999999999999999999999 out of range [1, 3600000]");
  EXPECT_EQ(SetFromText(*FindOption("l1-gb"), "1e999", &config).code(), StatusCode::kOutOfRange);
  EXPECT_EQ(config.lease_ms, ServerConfig().lease_ms);
}

TEST(OptionTable, TypeNamesAndLimitsComeFromTheEntry) {
  EXPECT_EQ(TypeName(*FindOption("backend")), "{auto,host,cuda}");
  EXPECT_EQ(LimitsText(*FindOption("backend")), "auto|host|cuda");
  EXPECT_EQ(TypeName(*FindOption("l1-gb")), "FLOAT");
  EXPECT_EQ(LimitsText(*FindOption("l1-gb")), "[0.001, 65536]");
  EXPECT_EQ(TypeName(*FindOption("socket-mode")), "OCTAL");
  EXPECT_EQ(LimitsText(*FindOption("socket-mode")), "[0000, 0777]");
  EXPECT_EQ(TypeName(*FindOption("socket")), "TEXT");
  EXPECT_EQ(LimitsText(*FindOption("socket")), "");
}

}  // namespace
}  // namespace kvstash::config::internal
