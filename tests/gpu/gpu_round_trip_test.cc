// Byte-exact round trips through a real kvstashd on the cuda backend, between
// two GPU engine processes: one stores a prompt from its cudaMalloc'd KV, the
// other retrieves it into poisoned blocks of its own and compares all of its
// memory with what the kernels' CPU twins predict. Every layout in both
// transfer modes, with and without multi-path retrieves and stores (then
// NVLink peers carry part of both the store and the retrieve). Skips
// without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <ostream>
#include <string>
#include <tuple>

#include <nlohmann/json.hpp>

#include "gpu.h"
#include "kvstash/client.h"

namespace kvstash::testing {
namespace {

struct RoundTrip {
  std::string name;
  std::string layout;
  uint32_t prompt_tokens = 200;  // 3 chunks of 64 and a partial one of 8
  uint32_t skip_tokens = 0;
};
void PrintTo(const RoundTrip& r, std::ostream* os) { *os << r.name; }

std::vector<RoundTrip> RoundTrips() {
  return {
      {"VllmFlashNhdBf16", "vllm_nhd"},
      {"VllmHndBf16", "vllm_hnd"},
      {"FlashInferBlockFirst", "flashinfer"},
      {"MlaBf16", "mla_bf16"},
      {"MlaFp8Entries656Block64", "mla_fp8"},
      {"Int8Heads132", "int8_132"},
      {"HybridTwoGroups", "hybrid"},
      {"PaddedBlockStride", "padded"},
      // Chunk 0 wholly on the GPU already, chunk 1 from its 7th token.
      {"SkipTokens", "vllm_nhd", 200, 70},
      // One chunk, partial, not ending on a block boundary.
      {"PartialChunkOnly", "vllm_hnd", 41, 0},
  };
}

class GpuRoundTripTest : public ::testing::TestWithParam<std::tuple<RoundTrip, std::string>> {
 protected:
  static void TearDownTestSuite() { daemons_.clear(); }
  void SetUp() override { KVSTASH_SKIP_WITHOUT_GPU(); }

  // One daemon per transfer mode, shared by the suite. "<mode>-multipath":
  // retrieves also through NVLink peers, however small (one path where the
  // host has no two GPUs joined by NVLink).
  DaemonProcess* Daemon(const std::string& mode) {
    auto& daemon = daemons_[mode];
    if (!daemon) {
      const size_t dash = mode.find("-multipath");
      auto started = dash == std::string::npos
                         ? StartCudaDaemon(mode)
                         : StartCudaDaemon(mode.substr(0, dash),
                                           {"--multipath", "on", "--multipath-min-path-kib", "0"});
      EXPECT_TRUE(started.ok()) << started.status().ToString();
      if (started.ok()) daemon = std::move(*started);
    }
    return daemon.get();
  }

  // Whether the daemon's copies may take several paths, and the bytes its
  // NVLink peers have carried so far for copies of `direction` ("store",
  // "retrieve").
  static std::pair<bool, uint64_t> Multipath(const std::string& socket,
                                             const std::string& direction) {
    ClientOptions options;
    options.socket = socket;
    auto client = Client::Connect(options);
    if (!client.ok()) return {false, 0};
    auto described = (*client)->Describe().get();
    if (!described.ok()) return {false, 0};
    const nlohmann::json multipath = nlohmann::json::parse(*described)["backend"]["multipath"];
    uint64_t carried = 0;
    for (const auto& h : multipath.value("relays", nlohmann::json::array())) {
      if (h.value("direction", "") == direction) carried += h.value("bytes_carried", uint64_t{0});
    }
    return {multipath.value("state", "").rfind("on:", 0) == 0, carried};
  }

  static std::map<std::string, std::unique_ptr<DaemonProcess>> daemons_;
};
std::map<std::string, std::unique_ptr<DaemonProcess>> GpuRoundTripTest::daemons_;

TEST_P(GpuRoundTripTest, AnotherEngineRetrievesEveryByteStored) {
  const auto& [trip, mode] = GetParam();
  DaemonProcess* daemon = Daemon(mode);
  ASSERT_NE(daemon, nullptr);
  const std::vector<std::string> common = {
      "--socket", daemon->socket(),       "--layout",        trip.layout,
      "--model",  trip.name + "-" + mode, "--prompt-tokens", std::to_string(trip.prompt_tokens)};
  auto with = [&](std::vector<std::string> args) {
    args.insert(args.begin(), common.begin(), common.end());
    return args;
  };
  const uint64_t stored_before = Multipath(daemon->socket(), "store").second;
  const ProcessResult stored = RunBinary("kvstash_gpu_test_engine", with({"--role", "store"}));
  ASSERT_EQ(stored.exit_code, 0) << stored.output;
  const auto [multipath_on, carried_before] = Multipath(daemon->socket(), "retrieve");
  const ProcessResult verified =
      RunBinary("kvstash_gpu_test_engine",
                with({"--role", "verify", "--skip-tokens", std::to_string(trip.skip_tokens)}));
  EXPECT_EQ(verified.exit_code, 0) << verified.output;
  EXPECT_NE(verified.output.find("bytes equal"), std::string::npos) << verified.output;
  const bool no_floor = mode.find("-multipath") != std::string::npos;
  if (multipath_on && no_floor && trip.prompt_tokens > 64 && trip.skip_tokens == 0) {
    // Idle peers and no size floor: the NVLink peer carried part of it.
    // (The plain modes take multi-path too, by default, but only for copies
    // above --multipath-min-path-kib.)
    EXPECT_GT(Multipath(daemon->socket(), "retrieve").second, carried_before)
        << "no peer carried any byte of the retrieve";
    EXPECT_GT(Multipath(daemon->socket(), "store").second, stored_before)
        << "no peer carried any byte of the store";
  }
  EXPECT_TRUE(daemon->running());
}

INSTANTIATE_TEST_SUITE_P(Layouts, GpuRoundTripTest,
                         ::testing::Combine(::testing::ValuesIn(RoundTrips()),
                                            ::testing::Values("dma", "direct", "dma-multipath",
                                                              "direct-multipath")),
                         [](const auto& info) {
                           std::string mode = std::get<1>(info.param);
                           std::replace(mode.begin(), mode.end(), '-', '_');
                           return std::get<0>(info.param).name + "_" + mode;
                         });

}  // namespace
}  // namespace kvstash::testing
