// The CLI's reading of a command line before CLI11 does: the word meant as
// the subcommand, and the closest subcommand name for a typo.
#include <gtest/gtest.h>

#include "common.h"

namespace kvstash::cli {
namespace {

const std::vector<std::string> kNames = {"ping", "describe", "stats", "clear", "bench"};

TEST(CliWords, SuggestsTheClosestSubcommand) {
  EXPECT_EQ(ClosestName("stast", kNames), "stats");
  EXPECT_EQ(ClosestName("stat", kNames), "stats");
  EXPECT_EQ(ClosestName("desc", kNames), "describe");
  EXPECT_EQ(ClosestName("bnech", kNames), "bench");
  EXPECT_EQ(ClosestName("pong", kNames), "ping");
  EXPECT_EQ(ClosestName("frobnicate", kNames), "");
}

TEST(CliWords, FirstCommandWordSkipsGlobalOptionsAndTheirValues) {
  const char* argv[] = {"kvstash", "--socket", "/tmp/k.sock", "--json", "--timeout-ms",
                        "5",       "stast",    "--model",     "m"};
  EXPECT_EQ(FirstCommandWord(9, argv), "stast");
  const char* joined[] = {"kvstash", "--socket=/tmp/k.sock", "ping"};
  EXPECT_EQ(FirstCommandWord(3, joined), "ping");
  const char* none[] = {"kvstash", "--json"};
  EXPECT_EQ(FirstCommandWord(2, none), "");
}

}  // namespace
}  // namespace kvstash::cli
