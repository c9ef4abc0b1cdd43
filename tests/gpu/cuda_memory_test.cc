// kvstash/cuda_memory.h in the engine's process: allocations found and
// shared once, offsets, the GPU's UUID, and clear errors for memory CUDA IPC
// cannot share (host memory, the virtual memory API). Skips without a GPU.
#include "kvstash/cuda_memory.h"

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>

#include "gpu.h"
#include "kvstash/cuda/buffers.h"
#include "kvstash/cuda/driver_api.h"
#include "layouts.h"

namespace kvstash::testing {
namespace {

LayerGeometry SmallGeometry() {
  return kernels::test::KvFirstNhd(kernels::test::Geometry(2, 16, 2, 128, 64, DType::kBF16));
}

// Memory from cuMemCreate + cuMemMap, as PyTorch's expandable segments make it.
class VirtualMemory {
 public:
  static Result<std::unique_ptr<VirtualMemory>> Create(size_t bytes) {
    Result<const cuda::DriverApi*> api = cuda::Driver();
    if (!api.ok()) return api.status();
    const cuda::DriverApi& d = **api;
    std::unique_ptr<VirtualMemory> vm(new VirtualMemory(d));
    CUmemAllocationProp prop{};
    prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
    prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    prop.location.id = 0;
    size_t granularity = 0;
    KVSTASH_CU_RETURN_IF_ERROR(
        d.MemGetAllocationGranularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_MINIMUM));
    vm->size_ = (bytes + granularity - 1) / granularity * granularity;
    KVSTASH_CU_RETURN_IF_ERROR(d.MemCreate(&vm->handle_, vm->size_, &prop, 0));
    KVSTASH_CU_RETURN_IF_ERROR(d.MemAddressReserve(&vm->address_, vm->size_, 0, 0, 0));
    KVSTASH_CU_RETURN_IF_ERROR(d.MemMap(vm->address_, vm->size_, 0, vm->handle_, 0));
    vm->mapped_ = true;
    CUmemAccessDesc access{};
    access.location = prop.location;
    access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
    KVSTASH_CU_RETURN_IF_ERROR(d.MemSetAccess(vm->address_, vm->size_, &access, 1));
    return vm;
  }
  ~VirtualMemory() {
    if (mapped_) d_.MemUnmap(address_, size_);
    if (address_) d_.MemAddressFree(address_, size_);
    if (handle_) d_.MemRelease(handle_);
  }
  void* data() const { return reinterpret_cast<void*>(address_); }

 private:
  explicit VirtualMemory(const cuda::DriverApi& d) : d_(d) {}
  const cuda::DriverApi& d_;
  CUmemGenericAllocationHandle handle_ = 0;
  CUdeviceptr address_ = 0;
  size_t size_ = 0;
  bool mapped_ = false;
};

class CudaMemoryTest : public ::testing::Test {
 protected:
  void SetUp() override {
    KVSTASH_SKIP_WITHOUT_GPU();
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }
  cuda::DeviceBuffer Allocate(size_t bytes) {
    Result<cuda::DeviceBuffer> buffer = cuda::DeviceBuffer::Allocate(bytes);
    EXPECT_TRUE(buffer.ok()) << buffer.status().ToString();
    return buffer.ok() ? std::move(*buffer) : cuda::DeviceBuffer();
  }
};

TEST_F(CudaMemoryTest, LayersOfOneAllocationShareOneHandle) {
  const LayerGeometry g = SmallGeometry();
  const uint64_t extent = LayerExtentBytes(g);
  cuda::DeviceBuffer buffer = Allocate(4096 + 3 * extent);
  std::vector<CudaLayer> layers;
  for (int l = 0; l < 3; ++l) layers.push_back({buffer.data() + 4096 + l * extent, g});
  RegisterOptions options;
  ASSERT_TRUE(AddCudaLayers(layers, options).ok());
  ASSERT_EQ(options.allocations.size(), 1u);
  ASSERT_EQ(options.layers.size(), 3u);
  const CudaIpc& ipc = std::get<CudaIpc>(options.allocations[0]);
  EXPECT_GE(ipc.size_bytes, 4096 + 3 * extent);
  Result<cuda::GpuUuid> uuid = cuda::DeviceUuid(0);
  ASSERT_TRUE(uuid.ok());
  EXPECT_EQ(ipc.gpu_uuid, *uuid);
  for (uint32_t l = 0; l < 3; ++l) {
    EXPECT_EQ(options.layers[l].allocation, 0u);
    EXPECT_EQ(options.layers[l].offset_bytes, 4096 + l * extent);
  }
}

TEST_F(CudaMemoryTest, SeparateAllocationsGetSeparateHandlesAndRepeatsAreReused) {
  const LayerGeometry g = SmallGeometry();
  cuda::DeviceBuffer a = Allocate(LayerExtentBytes(g)), b = Allocate(LayerExtentBytes(g));
  RegisterOptions options;
  ASSERT_TRUE(AddCudaLayers({{a.data(), g}, {b.data(), g}}, options).ok());
  ASSERT_EQ(options.allocations.size(), 2u);
  EXPECT_NE(std::get<CudaIpc>(options.allocations[0]).ipc_handle,
            std::get<CudaIpc>(options.allocations[1]).ipc_handle);
  // A second call naming `a` again reuses its allocation entry.
  ASSERT_TRUE(AddCudaLayers({{a.data(), g}}, options).ok());
  EXPECT_EQ(options.allocations.size(), 2u);
  EXPECT_EQ(options.layers.back().allocation, 0u);
}

TEST_F(CudaMemoryTest, HostMemoryIsRefusedAndOptionsStayUntouched) {
  std::vector<uint8_t> host(LayerExtentBytes(SmallGeometry()));
  RegisterOptions options;
  const Status s = AddCudaLayers({{host.data(), SmallGeometry()}}, options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("not GPU memory"), std::string::npos) << s.ToString();
  EXPECT_TRUE(options.allocations.empty());
  EXPECT_TRUE(options.layers.empty());
}

TEST_F(CudaMemoryTest, LayerPastTheEndOfItsAllocationIsOutOfRange) {
  const LayerGeometry g = SmallGeometry();
  cuda::DeviceBuffer buffer = Allocate(LayerExtentBytes(g));
  RegisterOptions options;
  const Status s = AddCudaLayers({{buffer.data() + 4096, g}}, options);
  EXPECT_EQ(s.code(), StatusCode::kOutOfRange) << s.ToString();
}

TEST_F(CudaMemoryTest, VirtualMemoryGetsAClearErrorNamingCauseAndFix) {
  const LayerGeometry g = SmallGeometry();
  auto vm = VirtualMemory::Create(LayerExtentBytes(g));
  ASSERT_TRUE(vm.ok()) << vm.status().ToString();
  RegisterOptions options;
  const Status s = AddCudaLayers({{(*vm)->data(), g}}, options);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument) << s.ToString();
  EXPECT_NE(s.message().find("virtual memory API"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("expandable_segments:False"), std::string::npos) << s.ToString();
  EXPECT_NE(s.message().find("cudaMalloc"), std::string::npos) << s.ToString();
  EXPECT_TRUE(options.allocations.empty());
  std::printf("VMM error: %s\n", s.ToString().c_str());
}

}  // namespace
}  // namespace kvstash::testing
