// Which backend kvstashd runs: `auto` takes the GPU where one is usable and
// the host backend elsewhere; `cuda` without a usable GPU (or in a build
// without CUDA) refuses to start with a message that says why and what to
// use instead. Runs everywhere, GPU or not (CI has none).
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include "daemon_process.h"
#include "kvstash/client.h"
#if KVSTASH_HAVE_CUDA
#include "kvstash/cuda/devices.h"
#endif

namespace kvstash::testing {
namespace {

bool GpuUsable() {
#if KVSTASH_HAVE_CUDA
  return cuda::DeviceCount().ok();
#else
  return false;
#endif
}

TEST(BackendSelection, AutoUsesTheGpuWhereThereIsOneAndTheHostElsewhere) {
  auto daemon =
      DaemonProcess::Start({"--backend", "auto", "--l1-gb", "0.0625", "--l1-slice-mb", "8"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  ClientOptions options;
  options.socket = (*daemon)->socket();
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok()) << client.status().ToString();
  EXPECT_EQ((*client)->server_info().backend, GpuUsable() ? "cuda" : "host");
  auto described = (*client)->Describe().get();
  ASSERT_TRUE(described.ok());
  EXPECT_EQ(nlohmann::json::parse(*described)["server"]["backend"], GpuUsable() ? "cuda" : "host");
  EXPECT_EQ((*daemon)->Stop(), 0);
}

TEST(BackendSelection, CudaWithoutAUsableGpuFailsStartupSayingWhy) {
  if (GpuUsable()) GTEST_SKIP() << "a GPU is usable here: the cuda backend starts";
  const ProcessResult result =
      RunBinary("kvstashd", {"--backend", "cuda", "--socket", "ipc:///tmp/kvstash-no-gpu-test.sock",
                             "--l1-gb", "0.0625", "--l1-slice-mb", "8"});
  EXPECT_EQ(result.exit_code, 1) << result.output;
  EXPECT_NE(result.output.find("--backend cuda: "), std::string::npos) << result.output;
  EXPECT_NE(result.output.find("--backend host"), std::string::npos) << result.output;
}

}  // namespace
}  // namespace kvstash::testing
