// The CUDA copy lane on its own, against the kernels' CPU twins, byte for
// byte, on every kernel test layout (656-byte MLA entries and 132-byte int8
// heads among them), in both transfer modes: a retrieve of every layer at
// once, a layer-wise retrieve in growing steps, a store, a second
// request of a registration (its layer addresses cached on the GPU), a
// registration made anew at the same addresses (a fresh entry, never the
// dropped one's), and a chunk already past its deadline (left out whole).
// L1 slots sit side by side in one registered buffer, the
// last in another "slab", so runs are coalesced and broken where they must.
// Skips without a GPU.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <sys/mman.h>

#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <tuple>

#include "cuda_copy_lane.h"
#include "gpu.h"
#include "layouts.h"

namespace kvstash::backends {
namespace {

using kernels::test::AllLayouts;
using kernels::test::ChunkSpec;
using kernels::test::kFlatOffsetBytes;
using kernels::test::TestLayout;

constexpr uint32_t kLayers = 9;  // layer-wise: 9 ranges in steps of 1, 1, 2, 4 and 1

enum class Scenario { kRetrieve, kLayerWiseRetrieve, kStore };

struct Case {
  TestLayout layout;
  TransferMode mode;
  Scenario scenario;
};

std::string NameOf(const ::testing::TestParamInfo<Case>& info) {
  const char* scenario[] = {"Retrieve", "LayerWiseRetrieve", "Store"};
  return info.param.layout.name + "_" + scenario[int(info.param.scenario)] + "_" +
         (info.param.mode == TransferMode::kDma ? "dma" : "direct");
}

std::vector<Case> Cases() {
  std::vector<Case> cases;
  for (TestLayout l : AllLayouts()) {
    l.num_layers = kLayers;
    for (TransferMode mode : {TransferMode::kDma, TransferMode::kDirect}) {
      for (Scenario s : {Scenario::kRetrieve, Scenario::kLayerWiseRetrieve, Scenario::kStore})
        cases.push_back({l, mode, s});
    }
  }
  return cases;
}

class CudaLaneTest : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    KVSTASH_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
    const TestLayout& l = GetParam().layout;
    chunk_bytes_ = (l.flat_bytes() + 255) / 256 * 256;
    specs_ = kernels::test::MixedBatch(l, 7);
    // The engine's layers on the GPU and their host twin.
    host_kv_ = kernels::test::RandomBytes(l.arena_bytes(), 11);
    ASSERT_EQ(cudaMalloc(reinterpret_cast<void**>(&device_kv_), l.arena_bytes()), cudaSuccess);
    ASSERT_EQ(cudaMemcpy(device_kv_, host_kv_.data(), host_kv_.size(), cudaMemcpyHostToDevice),
              cudaSuccess);
    // L1: the three slots side by side in one registered mapping.
    l1_bytes_ = 3 * chunk_bytes_;
    void* l1 = mmap(nullptr, l1_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ASSERT_NE(l1, MAP_FAILED);
    l1_ = static_cast<uint8_t*>(l1);
    const std::vector<uint8_t> flat = kernels::test::RandomBytes(l1_bytes_, 13);
    std::memcpy(l1_, flat.data(), l1_bytes_);
    ASSERT_EQ(cudaHostRegister(l1_, l1_bytes_, cudaHostRegisterPortable | cudaHostRegisterMapped),
              cudaSuccess);
    CudaCopyLane::Options options;
    options.direction =
        GetParam().scenario == Scenario::kStore ? Direction::kStore : Direction::kRetrieve;
    options.mode = GetParam().mode;
    options.staging_bytes = 16 << 20;
    int same_address = 0;
    ASSERT_EQ(
        cudaDeviceGetAttribute(&same_address, cudaDevAttrCanUseHostPointerForRegisteredMem, 0),
        cudaSuccess);
    options.host_pointers_on_device = same_address != 0;
    auto lane = CudaCopyLane::Create(options);
    ASSERT_TRUE(lane.ok()) << lane.status().ToString();
    lane_ = std::move(*lane);
  }
  void TearDown() override {
    lane_.reset();
    if (l1_ != nullptr) {
      cudaHostUnregister(l1_);
      munmap(l1_, l1_bytes_);
    }
    if (device_kv_ != nullptr) cudaFree(device_kv_);
  }
  // The registration's groups over `base` (device or host twin), layers in
  // order or reversed.
  std::vector<GroupAddresses> Groups(uint8_t* base, bool reversed) const {
    const TestLayout& l = GetParam().layout;
    GroupAddresses g;
    g.layer_bases = kernels::test::LayerBases(l, base);
    if (reversed) std::reverse(g.layer_bases.begin(), g.layer_bases.end());
    g.group = kernels::test::MakeGroup(l, g.layer_bases);
    std::vector<GroupAddresses> groups = {std::move(g)};
    groups[0].group.layer_bases = groups[0].layer_bases.data();
    return groups;
  }
  std::vector<kernels::ChunkCopy> Chunks(uint8_t* l1) const {
    return kernels::test::MakeChunkCopies(specs_, {l1, l1 + chunk_bytes_, l1 + 2 * chunk_bytes_});
  }
  // One copy through the lane for registration `id`; then checks the
  // engine's layers (retrieve) or the L1 slots (store) against the CPU twin
  // run on copies of the same bytes.
  void CopyAndCheck(uint64_t id, bool reversed) {
    const Case& c = GetParam();
    const bool store = c.scenario == Scenario::kStore;
    std::vector<uint8_t> expected_kv = host_kv_;
    std::vector<uint8_t> expected_l1(l1_, l1_ + l1_bytes_);
    const std::vector<GroupAddresses> host_groups = Groups(expected_kv.data(), reversed);
    const std::vector<kernels::ChunkCopy> host_chunks = Chunks(expected_l1.data());
    ASSERT_TRUE((store ? kernels::GatherChunksCpu(host_groups[0].group, host_chunks.data(), 3)
                       : kernels::ScatterChunksCpu(host_groups[0].group, host_chunks.data(), 3))
                    .ok());

    const std::vector<GroupAddresses> groups = Groups(device_kv_, reversed);
    const CopyLayout layout{id, chunk_bytes_, groups};
    CopySignal signal;  // layer-wise: one range per layer, no board slots
    for (uint32_t k = 0; k < kLayers; ++k) signal.ranges.push_back({{k, 1}});
    CopyDeadlines deadlines;
    const Status copied =
        lane_->Copy(layout, Chunks(l1_), {0, 0, 1}, deadlines,
                    c.scenario == Scenario::kLayerWiseRetrieve ? &signal : nullptr);
    ASSERT_TRUE(copied.ok()) << copied.ToString();

    std::vector<uint8_t> kv(host_kv_.size());
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (store) {
      EXPECT_EQ(kv, host_kv_) << "a store wrote engine memory";
      // Bytes outside the flat groups are the lane's to leave alone or not;
      // the groups' bytes must be exact.
      const uint64_t group_bytes = FlatGroupBytes(GetParam().layout.shape());
      for (int i = 0; i < 3; ++i) {
        const uint8_t* got = l1_ + i * chunk_bytes_ + kFlatOffsetBytes;
        const uint8_t* want = expected_l1.data() + i * chunk_bytes_ + kFlatOffsetBytes;
        EXPECT_EQ(std::memcmp(got, want, group_bytes), 0) << "chunk " << i;
      }
      std::memcpy(l1_, expected_l1.data(), l1_bytes_);
    } else {
      EXPECT_EQ(kv, expected_kv);
      host_kv_ = kv;
    }
  }

  uint64_t chunk_bytes_ = 0;
  std::vector<ChunkSpec> specs_;
  std::vector<uint8_t> host_kv_;
  uint8_t* device_kv_ = nullptr;
  uint8_t* l1_ = nullptr;
  uint64_t l1_bytes_ = 0;
  std::unique_ptr<CudaCopyLane> lane_;
};

TEST_P(CudaLaneTest, EveryByteMatchesTheCpuTwin) { CopyAndCheck(1, false); }

TEST_P(CudaLaneTest, ASecondRequestOfARegistrationReusesItsAddressesExactly) {
  CopyAndCheck(1, false);
  // New bytes in the slots (and engine memory reset), same registration.
  const std::vector<uint8_t> fresh = kernels::test::RandomBytes(l1_bytes_, 17);
  std::memcpy(l1_, fresh.data(), l1_bytes_);
  host_kv_ = kernels::test::RandomBytes(host_kv_.size(), 19);
  ASSERT_EQ(cudaMemcpy(device_kv_, host_kv_.data(), host_kv_.size(), cudaMemcpyHostToDevice),
            cudaSuccess);
  CopyAndCheck(1, false);
}

TEST_P(CudaLaneTest, ARegistrationMadeAgainAtTheSameAddressesGetsAFreshPlan) {
  CopyAndCheck(1, false);
  // Registration 1 dropped; registration 2 names the same memory, its
  // layers in the other order: the lane must not use 1's addresses.
  CopyAndCheck(2, true);
}

// A chunk already past its deadline when Copy starts is left out whole: it
// alone is missed, none of its bytes moves (a retrieve writes none of its
// blocks, a store none of its slot) and the others are exact. Each of the
// three chunks in turn: the first, one inside a run of adjacent slots, the
// last (in a slab of its own).
TEST_P(CudaLaneTest, AChunkPastItsDeadlineIsLeftOutWhole) {
  const bool store = GetParam().scenario == Scenario::kStore;
  const uint64_t group_bytes = FlatGroupBytes(GetParam().layout.shape());
  const auto now = CopyDeadlines::Clock::now();
  for (size_t late = 0; late < 3; ++late) {
    SCOPED_TRACE("chunk " + std::to_string(late) + " past its deadline");
    // The CPU twin copies the other two chunks only.
    std::vector<uint8_t> expected_kv = host_kv_;
    std::vector<uint8_t> expected_l1(l1_, l1_ + l1_bytes_);
    const std::vector<uint8_t> l1_before = expected_l1;
    const std::vector<GroupAddresses> host_groups = Groups(expected_kv.data(), false);
    std::vector<kernels::ChunkCopy> host_chunks = Chunks(expected_l1.data());
    host_chunks.erase(host_chunks.begin() + long(late));
    ASSERT_TRUE((store ? kernels::GatherChunksCpu(host_groups[0].group, host_chunks.data(), 2)
                       : kernels::ScatterChunksCpu(host_groups[0].group, host_chunks.data(), 2))
                    .ok());

    const std::vector<GroupAddresses> groups = Groups(device_kv_, false);
    const CopyLayout layout{1, chunk_bytes_, groups};
    CopySignal signal;  // layer-wise: one range per layer, no board slots
    for (uint32_t k = 0; k < kLayers; ++k) signal.ranges.push_back({{k, 1}});
    CopyDeadlines deadlines;
    deadlines.at.assign(3, now + std::chrono::hours(1));
    deadlines.at[late] = now - std::chrono::seconds(1);
    const Status copied =
        lane_->Copy(layout, Chunks(l1_), {0, 0, 1}, deadlines,
                    GetParam().scenario == Scenario::kLayerWiseRetrieve ? &signal : nullptr);
    ASSERT_TRUE(copied.ok()) << copied.ToString();
    std::vector<uint8_t> want_missed(3, 0);
    want_missed[late] = 1;
    EXPECT_EQ(deadlines.missed, want_missed);

    std::vector<uint8_t> kv(host_kv_.size());
    ASSERT_EQ(cudaMemcpy(kv.data(), device_kv_, kv.size(), cudaMemcpyDeviceToHost), cudaSuccess);
    if (store) {
      EXPECT_EQ(kv, host_kv_) << "a store wrote engine memory";
      for (size_t i = 0; i < 3; ++i) {
        const uint64_t at = i * chunk_bytes_;
        if (i == late) {
          EXPECT_EQ(std::memcmp(l1_ + at, l1_before.data() + at, chunk_bytes_), 0)
              << "the late chunk's slot was written";
        } else {
          EXPECT_EQ(std::memcmp(l1_ + at + kFlatOffsetBytes,
                                expected_l1.data() + at + kFlatOffsetBytes, group_bytes),
                    0)
              << "chunk " << i;
        }
      }
      std::memcpy(l1_, l1_before.data(), l1_bytes_);
    } else {
      // Blocks are the chunks' own: the late chunk's keep their bytes.
      EXPECT_EQ(kv, expected_kv);
      host_kv_ = kv;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Layouts, CudaLaneTest, ::testing::ValuesIn(Cases()), NameOf);

}  // namespace
}  // namespace kvstash::backends
