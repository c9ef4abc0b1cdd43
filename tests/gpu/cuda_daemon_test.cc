// kvstashd's cuda backend seen from one engine process: IPC allocations
// opened once, shared between registrations and closed with the last one
// (or when the engine that registered them goes silent, as a dead one does);
// declared sizes checked against the real allocation; GPUs found by UUID;
// the GPU memory each transfer mode holds. Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <chrono>
#include <thread>

#include <nlohmann/json.hpp>

#include "gpu.h"
#include "kvstash/client.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda_memory.h"
#include "kvstash/host_memory.h"
#include "layouts.h"

namespace kvstash::testing {
namespace {

class CudaDaemonTest : public ::testing::TestWithParam<std::string> {
 protected:
  void SetUp() override {
    KVSTASH_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    // Registrations of a client silent for 600 ms are dropped (a dead engine).
    auto daemon = StartCudaDaemon(GetParam(), {"--peer-timeout-ms", "600"});
    ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
    daemon_ = std::move(*daemon);
    ClientOptions options;
    options.socket = daemon_->socket();
    options.request_timeout = std::chrono::seconds(30);
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    client_ = std::move(*client);
    geometry_ = kernels::test::KvFirstNhd(kernels::test::Geometry(2, 16, 8, 256, 64, DType::kBF16));
    for (auto* buffer : {&a_, &b_}) {
      auto allocated = cuda::DeviceBuffer::Allocate(2 * LayerExtentBytes(geometry_));
      ASSERT_TRUE(allocated.ok()) << allocated.status().ToString();
      *buffer = std::move(*allocated);
    }
  }
  // Four layers in two allocations.
  RegisterOptions Options(const std::string& model) {
    RegisterOptions options;
    options.model = model;
    const uint64_t extent = LayerExtentBytes(geometry_);
    const Status s = AddCudaLayers({{a_.data(), geometry_},
                                    {a_.data() + extent, geometry_},
                                    {b_.data(), geometry_},
                                    {b_.data() + extent, geometry_}},
                                   options);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return options;
  }
  nlohmann::json Backend() {
    auto described = client_->Describe().get();
    EXPECT_TRUE(described.ok()) << described.status().ToString();
    return described.ok() ? nlohmann::json::parse(*described)["backend"] : nlohmann::json();
  }

  std::unique_ptr<DaemonProcess> daemon_;
  std::unique_ptr<Client> client_;
  LayerGeometry geometry_;
  cuda::DeviceBuffer a_, b_;
};

TEST_P(CudaDaemonTest, AllocationsAreOpenedOnceAndClosedWithTheLastRegistration) {
  auto first = client_->RegisterKV(Options("model-a")).get();
  auto second = client_->RegisterKV(Options("model-b")).get();
  ASSERT_TRUE(first.ok()) << first.status().ToString();
  ASSERT_TRUE(second.ok()) << second.status().ToString();
  EXPECT_EQ(Backend()["ipc_allocations_open"], 2);
  ASSERT_TRUE(client_->UnregisterKV(first->id).get().ok());
  EXPECT_EQ(Backend()["ipc_allocations_open"], 2);
  ASSERT_TRUE(client_->UnregisterKV(second->id).get().ok());
  EXPECT_EQ(Backend()["ipc_allocations_open"], 0);
}

TEST_P(CudaDaemonTest, AnEngineGoneSilentLosesItsRegistrationsAndTheirAllocationsClose) {
  {
    ClientOptions options;
    options.socket = daemon_->socket();
    auto engine = Client::Connect(options);
    ASSERT_TRUE(engine.ok()) << engine.status().ToString();
    auto reg = (*engine)->RegisterKV(Options("model-gone")).get();
    ASSERT_TRUE(reg.ok()) << reg.status().ToString();
    EXPECT_EQ(Backend()["ipc_allocations_open"], 2);
  }  // destroyed without UnregisterKV: silent from now on, as a dead engine is
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (Backend()["ipc_allocations_open"] != 0 && std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  EXPECT_EQ(Backend()["ipc_allocations_open"], 0) << "the dead engine's GPU memory is still open";
  // This client's own registration, idle as long, stays (its pings).
  auto kept = client_->RegisterKV(Options("model-kept")).get();
  ASSERT_TRUE(kept.ok()) << kept.status().ToString();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  EXPECT_EQ(Backend()["ipc_allocations_open"], 2);
  EXPECT_TRUE(client_->UnregisterKV(kept->id).get().ok());
}

TEST_P(CudaDaemonTest, DeclaredSizeLargerThanTheRealAllocationIsOutOfRange) {
  RegisterOptions options = Options("model");
  std::get<CudaIpc>(options.allocations[1]).size_bytes += 64 << 20;
  options.layers[3].offset_bytes += 32 << 20;  // inside the declared size only
  auto reg = client_->RegisterKV(options).get();
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kOutOfRange) << reg.status().ToString();
  EXPECT_NE(reg.status().message().find("bytes declared"), std::string::npos)
      << reg.status().ToString();
  EXPECT_EQ(Backend()["ipc_allocations_open"], 0);
  EXPECT_TRUE(daemon_->running());
}

TEST_P(CudaDaemonTest, UnknownGpuUuidIsNotFound) {
  RegisterOptions options = Options("model");
  for (Allocation& a : options.allocations) std::get<CudaIpc>(a).gpu_uuid[0] ^= 0xFF;
  auto reg = client_->RegisterKV(options).get();
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kNotFound) << reg.status().ToString();
  EXPECT_NE(reg.status().message().find("not visible to kvstashd"), std::string::npos);
}

TEST_P(CudaDaemonTest, HostSharedMemoryIsRefused) {
  auto shm = HostKvMemory::Create(LayerExtentBytes(geometry_));
  ASSERT_TRUE(shm.ok());
  RegisterOptions options;
  options.model = "model";
  options.allocations.push_back(shm->handle());
  options.layers.push_back({0, 0, geometry_});
  auto reg = client_->RegisterKV(options).get();
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kInvalidArgument) << reg.status().ToString();
}

TEST_P(CudaDaemonTest, DescribeShowsTheModeAndTheGpuMemoryHeld) {
  const nlohmann::json backend = Backend();
  EXPECT_EQ(backend["transfer_mode"], GetParam());
  // dma: a staging ring on every GPU kvstashd serves (--staging-mb 32);
  // direct: no staging at all. Both: the plan arenas of the lanes that
  // copied so far.
  uint64_t staging = 0, plans = 0;
  for (const auto& device : backend["devices"]) {
    staging += device["staging_bytes"].get<uint64_t>();
    plans += device["plan_bytes"].get<uint64_t>();
  }
  const uint64_t gpus = backend["devices"].size();
  EXPECT_EQ(staging, GetParam() == "dma" ? gpus * (32ull << 20) : 0ull);
  // Multi-path (on by default): each relay's staging, where GPUs have NVLink peers.
  uint64_t relays = 0;
  for (const auto& relay : backend["multipath"].value("relays", nlohmann::json::array())) {
    relays += relay["staging_bytes"].get<uint64_t>();
  }
  EXPECT_EQ(backend["gpu_memory_bytes"].get<uint64_t>(), staging + plans + relays);
  std::printf("%s: %s\n", GetParam().c_str(), backend.dump().c_str());
}

TEST_P(CudaDaemonTest, DescribeSaysWhetherRetrievesTakeSeveralPaths) {
  {
    auto off = StartCudaDaemon(GetParam(), {"--multipath", "off"});
    ASSERT_TRUE(off.ok()) << off.status().ToString();
    ClientOptions options;
    options.socket = (*off)->socket();
    auto client = Client::Connect(options);
    ASSERT_TRUE(client.ok()) << client.status().ToString();
    auto described = (*client)->Describe().get();
    ASSERT_TRUE(described.ok()) << described.status().ToString();
    EXPECT_EQ(nlohmann::json::parse(*described)["backend"]["multipath"]["state"],
              "off (--multipath off)");
  }
  // On by default: the fixture's daemon.
  const nlohmann::json multipath = Backend()["multipath"];
  const std::string state = multipath["state"];
  int devices = 0;
  ASSERT_EQ(cudaGetDeviceCount(&devices), cudaSuccess);
  if (devices < 2) {
    EXPECT_EQ(state, "one path: one GPU visible");
    return;
  }
  // Every pair of GPUs, with what was found between them; relays exactly
  // where some pair has NVLink.
  ASSERT_EQ(multipath["links"].size(), size_t(devices * (devices - 1) / 2)) << multipath.dump();
  bool any_nvlink = false;
  for (const auto& link : multipath["links"]) any_nvlink |= link["nvlink"].get<bool>();
  EXPECT_EQ(state.rfind("on:", 0) == 0, any_nvlink) << state;
  EXPECT_EQ(multipath["relays"].empty(), !any_nvlink) << multipath.dump();
  std::printf("%s multipath: %s\n", GetParam().c_str(), multipath.dump().c_str());
}

INSTANTIATE_TEST_SUITE_P(Modes, CudaDaemonTest, ::testing::Values("dma", "direct"));

TEST(CudaDaemon, ChunkLargerThanTheStagingRingIsRefusedNamingTheFix) {
  KVSTASH_SKIP_WITHOUT_GPU();
  auto daemon = StartCudaDaemon("dma", {"--staging-mb", "1"});
  ASSERT_TRUE(daemon.ok()) << daemon.status().ToString();
  ClientOptions options;
  options.socket = (*daemon)->socket();
  auto client = Client::Connect(options);
  ASSERT_TRUE(client.ok());
  const LayerGeometry g =
      kernels::test::KvFirstNhd(kernels::test::Geometry(2, 16, 8, 256, 64, DType::kBF16));
  auto buffer = cuda::DeviceBuffer::Allocate(LayerExtentBytes(g));
  ASSERT_TRUE(buffer.ok());
  RegisterOptions reg_options;
  reg_options.model = "model";
  ASSERT_TRUE(AddCudaLayers({{buffer->data(), g}}, reg_options).ok());
  auto reg = (*client)->RegisterKV(reg_options).get();  // a chunk: 2 x 64 x 2 KiB = 256 KiB
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  reg_options.layers.assign(4,
                            reg_options.layers[0]);  // 1 MiB chunks: over the 512 KiB per direction
  reg = (*client)->RegisterKV(reg_options).get();
  ASSERT_FALSE(reg.ok());
  EXPECT_EQ(reg.status().code(), StatusCode::kTooLarge) << reg.status().ToString();
  EXPECT_NE(reg.status().message().find("--staging-mb"), std::string::npos)
      << reg.status().ToString();
}

}  // namespace
}  // namespace kvstash::testing
