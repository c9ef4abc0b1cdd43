// The CUDA kernels against the CPU twins on every layout of layouts.h, with
// flat chunks and plans in device memory (`dma` mode) and in mapped pinned
// host memory (`direct` mode); random payloads, poisoned outputs, several
// chunks per launch. Also prints (never asserts) the bandwidth of one
// Llama-3-8B chunk against cudaMemcpy. Every test skips without a CUDA device.
#include "kvstash/kernels/chunk_copy_cuda.h"

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <ostream>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include "bytes.h"
#include "kvstash/kernels/access_width.h"
#include "layouts.h"

namespace kvstash::kernels::test {
namespace {

void CudaOk(cudaError_t error, const char* call) {
  if (error != cudaSuccess)
    throw std::runtime_error(std::string(call) + ": " + cudaGetErrorString(error));
}
#define CUDA_OK(call) CudaOk((call), #call)

enum class Mode { kDma, kDirect };
void PrintTo(Mode mode, std::ostream* os) { *os << (mode == Mode::kDma ? "dma" : "direct"); }

// Memory the kernels reach: device memory, or mapped pinned host memory.
class GpuBuffer {
 public:
  GpuBuffer(bool mapped_host, size_t bytes) {
    if (mapped_host) {
      CUDA_OK(cudaHostAlloc(reinterpret_cast<void**>(&host_), bytes, cudaHostAllocMapped));
      CUDA_OK(cudaHostGetDevicePointer(reinterpret_cast<void**>(&device_), host_, 0));
    } else {
      CUDA_OK(cudaMalloc(reinterpret_cast<void**>(&device_), bytes));
    }
  }
  ~GpuBuffer() { host_ != nullptr ? cudaFreeHost(host_) : cudaFree(device_); }
  GpuBuffer(const GpuBuffer&) = delete;
  GpuBuffer& operator=(const GpuBuffer&) = delete;

  uint8_t* device() const { return device_; }
  void Upload(const void* src, size_t bytes, size_t offset = 0) {
    if (host_ != nullptr) {
      std::memcpy(host_ + offset, src, bytes);
    } else {
      CUDA_OK(cudaMemcpy(device_ + offset, src, bytes, cudaMemcpyHostToDevice));
    }
  }
  std::vector<uint8_t> Download(size_t offset, size_t bytes) const {
    std::vector<uint8_t> out(bytes);
    CUDA_OK(cudaMemcpy(out.data(), device_ + offset, bytes, cudaMemcpyDefault));
    return out;
  }

 private:
  uint8_t* host_ = nullptr;
  uint8_t* device_ = nullptr;
};

uint64_t FlatStride(const TestLayout& l) { return (l.flat_bytes() + 255) / 256 * 256; }

// One launch's plan (layer bases, block ids, chunk entries) and its flat
// chunks, placed where `mode` puts them; the layers live in `arena`.
class DevicePlan {
 public:
  DevicePlan(const TestLayout& l, const std::vector<ChunkSpec>& specs, const GpuBuffer& arena,
             Mode mode)
      : flats_(mode == Mode::kDirect, specs.size() * FlatStride(l)),
        bases_buffer_(mode == Mode::kDirect, l.num_layers * sizeof(uint8_t*)),
        ids_buffer_(mode == Mode::kDirect, specs.size() * l.blocks_per_chunk() * sizeof(uint32_t)),
        chunks_buffer_(mode == Mode::kDirect, specs.size() * sizeof(ChunkCopy)) {
    bases_ = LayerBases(l, arena.device());
    bases_buffer_.Upload(bases_.data(), bases_.size() * sizeof(uint8_t*));
    for (size_t i = 0; i < specs.size(); ++i) {
      const size_t ids_offset = i * l.blocks_per_chunk() * sizeof(uint32_t);
      ids_buffer_.Upload(specs[i].block_ids.data(), specs[i].block_ids.size() * sizeof(uint32_t),
                         ids_offset);
      chunks_.push_back({flats_.device() + i * FlatStride(l),
                         reinterpret_cast<const uint32_t*>(ids_buffer_.device() + ids_offset),
                         static_cast<uint32_t>(specs[i].block_ids.size()), specs[i].num_tokens,
                         specs[i].skip_tokens});
    }
    chunks_buffer_.Upload(chunks_.data(), chunks_.size() * sizeof(ChunkCopy));
    group_ = {MakeGroup(l, bases_), reinterpret_cast<uint8_t* const*>(bases_buffer_.device())};
    Result<PreparedGroup> prepared = PrepareGroup(group_);
    if (!prepared.ok()) throw std::runtime_error("PrepareGroup: " + prepared.status().ToString());
    prepared_ = *prepared;
  }

  const DeviceGroupCopy& group() const { return group_; }
  const PreparedGroup& prepared() const { return prepared_; }
  DeviceChunkBatch batch() const {
    return {chunks_.data(), reinterpret_cast<const ChunkCopy*>(chunks_buffer_.device()),
            chunks_.size()};
  }
  GpuBuffer& flats() { return flats_; }

 private:
  GpuBuffer flats_, bases_buffer_, ids_buffer_, chunks_buffer_;
  std::vector<uint8_t*> bases_;    // host view of device addresses
  std::vector<ChunkCopy> chunks_;  // host view of device addresses
  DeviceGroupCopy group_;
  PreparedGroup prepared_{};
};

class GpuTest {
 protected:
  void SkipWithoutDevice() {
    int count = 0;
    const cudaError_t error = cudaGetDeviceCount(&count);
    if (error != cudaSuccess || count == 0) {
      GTEST_SKIP() << "no CUDA device: "
                   << (error != cudaSuccess ? cudaGetErrorString(error)
                                            : "cudaGetDeviceCount is 0");
    }
    CUDA_OK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  }
  void DestroyStream() {
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
  }
  cudaStream_t stream_ = nullptr;
};

class ChunkCopyGpuTest : public GpuTest,
                         public ::testing::TestWithParam<std::tuple<TestLayout, Mode>> {
 protected:
  void SetUp() override { SkipWithoutDevice(); }
  void TearDown() override { DestroyStream(); }
  const TestLayout& layout() const { return std::get<0>(GetParam()); }
  Mode mode() const { return std::get<1>(GetParam()); }
};

TEST_P(ChunkCopyGpuTest, GatherMatchesCpuTwin) {
  const TestLayout& l = layout();
  std::vector<uint8_t> host_arena = RandomBytes(l.arena_bytes(), 21);
  const std::vector<ChunkSpec> specs = MixedBatch(l, 22);
  std::vector<std::vector<uint8_t>> expected(specs.size(),
                                             std::vector<uint8_t>(l.flat_bytes(), kPoison));
  std::vector<uint8_t*> expected_flats;
  for (auto& flat : expected) expected_flats.push_back(flat.data());
  const std::vector<ChunkCopy> cpu_chunks = MakeChunkCopies(specs, expected_flats);
  const std::vector<uint8_t*> host_bases = LayerBases(l, host_arena.data());
  ASSERT_TRUE(GatherChunksCpu(MakeGroup(l, host_bases), cpu_chunks.data(), cpu_chunks.size()).ok());

  GpuBuffer arena(false, l.arena_bytes());
  arena.Upload(host_arena.data(), host_arena.size());
  DevicePlan plan(l, specs, arena, mode());
  const std::vector<uint8_t> poison(specs.size() * FlatStride(l), kPoison);
  plan.flats().Upload(poison.data(), poison.size());
  ASSERT_EQ(AccessWidthBytes(plan.group().group, plan.batch().chunks, specs.size()),
            l.access_width);

  const Status status = GatherChunks(plan.prepared(), plan.batch(), stream_);
  ASSERT_TRUE(status.ok()) << status.ToString();
  CUDA_OK(cudaStreamSynchronize(stream_));
  for (size_t i = 0; i < specs.size(); ++i) {
    EXPECT_TRUE(SameBytes(plan.flats().Download(i * FlatStride(l), l.flat_bytes()), expected[i]))
        << "chunk " << i;
  }
  EXPECT_TRUE(SameBytes(arena.Download(0, l.arena_bytes()), host_arena))
      << "gather wrote into the layers";
}

TEST_P(ChunkCopyGpuTest, ScatterMatchesCpuTwin) {
  const TestLayout& l = layout();
  // The layers hold older data, which the scatter must leave alone outside
  // [skip_tokens, num_tokens) of the named blocks.
  std::vector<uint8_t> expected = RandomBytes(l.arena_bytes(), 31);
  const std::vector<ChunkSpec> specs = MixedBatch(l, 32);
  std::vector<std::vector<uint8_t>> flats;
  std::vector<uint8_t*> flat_pointers;
  for (size_t i = 0; i < specs.size(); ++i) {
    flats.push_back(RandomBytes(l.flat_bytes(), 33 + i));
    flat_pointers.push_back(flats.back().data());
  }

  GpuBuffer arena(false, l.arena_bytes());
  arena.Upload(expected.data(), expected.size());
  DevicePlan plan(l, specs, arena, mode());
  for (size_t i = 0; i < specs.size(); ++i)
    plan.flats().Upload(flats[i].data(), l.flat_bytes(), i * FlatStride(l));

  const std::vector<ChunkCopy> cpu_chunks = MakeChunkCopies(specs, flat_pointers);
  const std::vector<uint8_t*> host_bases = LayerBases(l, expected.data());
  ASSERT_TRUE(
      ScatterChunksCpu(MakeGroup(l, host_bases), cpu_chunks.data(), cpu_chunks.size()).ok());

  const Status status = ScatterChunks(plan.prepared(), plan.batch(), stream_);
  ASSERT_TRUE(status.ok()) << status.ToString();
  CUDA_OK(cudaStreamSynchronize(stream_));
  EXPECT_TRUE(SameBytes(arena.Download(0, l.arena_bytes()), expected));
}

TEST_P(ChunkCopyGpuTest, RejectsTooFewBlockIdsBeforeLaunching) {
  const TestLayout& l = layout();
  GpuBuffer arena(false, l.arena_bytes());
  std::vector<ChunkSpec> specs = MixedBatch(l, 41);
  DevicePlan plan(l, specs, arena, mode());
  std::vector<ChunkCopy> chunks(plan.batch().chunks, plan.batch().chunks + specs.size());
  chunks[1].num_block_ids -= 1;
  DeviceChunkBatch batch = plan.batch();
  batch.chunks = chunks.data();
  EXPECT_EQ(GatherChunks(plan.prepared(), batch, stream_).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(ScatterChunks(plan.prepared(), batch, stream_).code(), StatusCode::kInvalidArgument);
}

INSTANTIATE_TEST_SUITE_P(Layouts, ChunkCopyGpuTest,
                         ::testing::Combine(::testing::ValuesIn(AllLayouts()),
                                            ::testing::Values(Mode::kDma, Mode::kDirect)),
                         [](const auto& info) {
                           return std::get<0>(info.param).name +
                                  (std::get<1>(info.param) == Mode::kDma ? "Dma" : "Direct");
                         });

class ChunkCopyGpuBandwidthTest : public GpuTest, public ::testing::Test {
 protected:
  void SetUp() override { SkipWithoutDevice(); }
  void TearDown() override { DestroyStream(); }

  // Milliseconds per call of `body`, averaged over a few after a warm-up.
  template <typename Body>
  float TimeMs(Body body) {
    constexpr int kWarmup = 3, kIterations = 20;
    for (int i = 0; i < kWarmup; ++i) body();
    cudaEvent_t start, stop;
    CUDA_OK(cudaEventCreate(&start));
    CUDA_OK(cudaEventCreate(&stop));
    CUDA_OK(cudaEventRecord(start, stream_));
    for (int i = 0; i < kIterations; ++i) body();
    CUDA_OK(cudaEventRecord(stop, stream_));
    CUDA_OK(cudaEventSynchronize(stop));
    float ms = 0;
    CUDA_OK(cudaEventElapsedTime(&ms, start, stop));
    cudaEventDestroy(start);
    cudaEventDestroy(stop);
    return ms / kIterations;
  }
};

void Report(const char* what, uint64_t bytes, float ms, float baseline_ms) {
  std::printf("[ bandwidth ] %-40s %7.1f MiB %9.1f us %8.1f GB/s  (%.2fx of the cudaMemcpy line)\n",
              what, bytes / 1048576.0, ms * 1e3, bytes / (ms * 1e-3) / 1e9, baseline_ms / ms);
}

TEST_F(ChunkCopyGpuBandwidthTest, ReportsLlama3_8bChunkAgainstCudaMemcpy) {
  // 32 layers of vLLM NHD [2, num_blocks, 16, 8, 128] bf16, chunks of 256 tokens.
  constexpr uint32_t kChunks = 8;
  TestLayout l;
  LayerGeometry g = Geometry(2, 16, 8, 256, 256, DType::kBF16);
  g.num_blocks = kChunks * 16 + 2;
  l.geometry = KvFirstNhd(g);
  l.num_layers = 32;
  l.chunk_tokens = 256;
  std::vector<ChunkSpec> specs;
  const std::vector<uint32_t> blocks = RandomBlocks(l.geometry.num_blocks, kChunks * 16, 51);
  for (uint32_t c = 0; c < kChunks; ++c) {
    specs.push_back(
        {std::vector<uint32_t>(blocks.begin() + c * 16, blocks.begin() + (c + 1) * 16), 256, 0});
  }
  const uint64_t chunk_bytes = FlatGroupBytes(l.shape());
  GpuBuffer arena(false, l.arena_bytes());
  CUDA_OK(cudaMemset(arena.device(), 0x5A, l.arena_bytes()));
  const std::vector<ChunkSpec> one(specs.begin(), specs.begin() + 1);
  DevicePlan dma(l, one, arena, Mode::kDma), direct(l, one, arena, Mode::kDirect);
  DevicePlan dma_batch(l, specs, arena, Mode::kDma);
  GpuBuffer copy_source(false, chunk_bytes), pinned(true, chunk_bytes);

  Status status;
  const float d2d = TimeMs([&] {
    CUDA_OK(cudaMemcpyAsync(dma.flats().device(), copy_source.device(), chunk_bytes,
                            cudaMemcpyDeviceToDevice, stream_));
  });
  const float d2h = TimeMs([&] {
    CUDA_OK(cudaMemcpyAsync(pinned.device(), copy_source.device(), chunk_bytes, cudaMemcpyDefault,
                            stream_));
  });
  const float h2d = TimeMs([&] {
    CUDA_OK(cudaMemcpyAsync(copy_source.device(), pinned.device(), chunk_bytes, cudaMemcpyDefault,
                            stream_));
  });
  const float gather = TimeMs([&] { status = GatherChunks(dma.prepared(), dma.batch(), stream_); });
  EXPECT_TRUE(status.ok()) << status.ToString();
  const float scatter =
      TimeMs([&] { status = ScatterChunks(dma.prepared(), dma.batch(), stream_); });
  EXPECT_TRUE(status.ok()) << status.ToString();
  const float gather_batch =
      TimeMs([&] { status = GatherChunks(dma_batch.prepared(), dma_batch.batch(), stream_); });
  EXPECT_TRUE(status.ok()) << status.ToString();
  const float gather_direct =
      TimeMs([&] { status = GatherChunks(direct.prepared(), direct.batch(), stream_); });
  EXPECT_TRUE(status.ok()) << status.ToString();
  const float scatter_direct =
      TimeMs([&] { status = ScatterChunks(direct.prepared(), direct.batch(), stream_); });
  EXPECT_TRUE(status.ok()) << status.ToString();

  Report("cudaMemcpyAsync device->device", chunk_bytes, d2d, d2d);
  Report("gather, 1 chunk, into device (dma)", chunk_bytes, gather, d2d);
  Report("scatter, 1 chunk, from device (dma)", chunk_bytes, scatter, d2d);
  Report("gather, 8 chunks per launch (dma)", kChunks * chunk_bytes, gather_batch, kChunks * d2d);
  Report("cudaMemcpyAsync device->pinned host", chunk_bytes, d2h, d2h);
  Report("gather, 1 chunk, into mapped host (direct)", chunk_bytes, gather_direct, d2h);
  Report("cudaMemcpyAsync pinned host->device", chunk_bytes, h2d, h2d);
  Report("scatter, 1 chunk, from mapped host (direct)", chunk_bytes, scatter_direct, h2d);
}

}  // namespace
}  // namespace kvstash::kernels::test
