// The pool against the machine: MemAvailable for every backend, the memlock
// limit for CUDA unless the process holds CAP_IPC_LOCK, and a pool given as a
// share of MemAvailable.
#include "memory_budget.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>

namespace kvstash::server {
namespace {

constexpr uint64_t kGiB = uint64_t{1} << 30;

MemoryFigures Figures(uint64_t available, uint64_t memlock, bool cap = false) {
  MemoryFigures f;
  f.available_bytes = available;
  f.memlock_bytes = memlock;
  f.can_lock_freely = cap;
  return f;
}

TEST(MemoryBudget, RefusesAPoolAboveMemAvailableNamingBothFigures) {
  const Status s = CheckPoolFits(64 * kGiB, "host", Figures(23 * kGiB, UINT64_MAX));
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("64.00 GiB"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("MemAvailable 23.00 GiB"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckPoolFits(22 * kGiB, "host", Figures(23 * kGiB, 0)).ok());
}

TEST(MemoryBudget, ChecksTheMemlockLimitForCudaOnly) {
  const MemoryFigures limited = Figures(100 * kGiB, 8 << 20);
  const Status s = CheckPoolFits(4 * kGiB, "cuda", limited);
  ASSERT_EQ(s.code(), StatusCode::kResourceExhausted);
  EXPECT_NE(s.message().find("RLIMIT_MEMLOCK of 8388608 bytes"), std::string::npos) << s.message();
  EXPECT_NE(s.message().find("4.00 GiB"), std::string::npos) << s.message();
  EXPECT_TRUE(CheckPoolFits(4 * kGiB, "host", limited).ok());
  EXPECT_TRUE(CheckPoolFits(4 * kGiB, "cuda", Figures(100 * kGiB, 8 << 20, /*cap=*/true)).ok());
  EXPECT_TRUE(CheckPoolFits(4 * kGiB, "cuda", Figures(100 * kGiB, UINT64_MAX)).ok());
}

TEST(MemoryBudget, ShareOfAvailableMemoryReplacesTheFixedSize) {
  config::ServerConfig config;
  config.l1_gb = 4;
  EXPECT_EQ(PoolBytes(config, Figures(10 * kGiB, 0)), 4 * kGiB);
  config.l1_share = 0.5;
  EXPECT_EQ(PoolBytes(config, Figures(10 * kGiB, 0)), 5 * kGiB);
}

TEST(MemoryBudget, ReadsMemAvailableFromMeminfo) {
  const std::string path = ::testing::TempDir() + "/meminfo";
  std::ofstream(path) << "MemTotal:       32768000 kB\nMemFree:  100 kB\nMemAvailable:   1024 kB\n";
  auto figures = ReadMemoryFigures(path);
  ASSERT_TRUE(figures.ok()) << figures.status().ToString();
  EXPECT_EQ(figures->available_bytes, 1024u * 1024);
  std::ofstream(path) << "MemTotal: 1 kB\n";
  EXPECT_EQ(ReadMemoryFigures(path).status().code(), StatusCode::kUnavailable);
  std::remove(path.c_str());
}

}  // namespace
}  // namespace kvstash::server
