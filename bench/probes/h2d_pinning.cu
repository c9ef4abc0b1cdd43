// Whether H2D copies out of L1 slabs run slower than the raw pinned copy the
// bench compares with (on an H100 they did not: bench/history/2026-11-22.md):
// times cudaMemcpyAsync host to device from memory pinned in different ways,
// alone and beside a device-to-device kernel like the scatter, and cut into
// pieces.
//
//   nvcc -O2 -arch=sm_90 -o h2d_pinning bench/probes/h2d_pinning.cu
//   ./h2d_pinning            # prints one line per case, GB/s median of 30
//
// Sources: cudaMallocHost; an anonymous mapping touched then registered
// (cudaHostRegister, as the CUDA backend pins a slab) with 4 KiB pages
// (MADV_NOHUGEPAGE) and with transparent huge pages (MADV_HUGEPAGE, 2 MiB
// aligned); and the slab way exactly (a 1 GiB mapping, 256 MiB slabs each
// registered on its own, copies from inside the second slab).
#include <cuda_runtime_api.h>
#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#define CHECK(x)                                                                             \
  do {                                                                                       \
    cudaError_t e = (x);                                                                     \
    if (e != cudaSuccess) {                                                                  \
      std::fprintf(stderr, "%s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                          \
    }                                                                                        \
  } while (0)

namespace {

constexpr uint64_t kMiB = 1 << 20;

__global__ void CopyKernel(const uint4* src, uint4* dst, uint64_t n) {
  for (uint64_t i = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; i < n;
       i += uint64_t(gridDim.x) * blockDim.x)
    dst[i] = src[i];
}

uint8_t* MapTouched(uint64_t bytes, int advice) {
  const uint64_t align = 2 * kMiB;
  void* raw =
      mmap(nullptr, bytes + align, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) std::exit(2);
  auto* p = reinterpret_cast<uint8_t*>((uintptr_t(raw) + align - 1) / align * align);
  madvise(p, bytes, advice);
  for (uint64_t i = 0; i < bytes; i += 4096) p[i] = uint8_t(i * 7 + 1);
  return p;
}

long AnonHugeKb() {
  std::ifstream f("/proc/self/smaps_rollup");
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind("AnonHugePages:", 0) == 0) return std::atol(line.c_str() + 14);
  }
  return -1;
}

struct Case {
  const char* name;
  uint8_t* host;
};

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// GB/s of copying `bytes` H2D from `host` in `pieces` copies (one event
// pair around them), median of `reps`; with `contend`, a D2D kernel over
// `bytes` runs on another stream meanwhile.
double Time(uint8_t* host, uint8_t* dev, uint8_t* dev2, uint64_t bytes, int pieces, bool contend,
            cudaStream_t s, cudaStream_t k, int reps = 30) {
  cudaEvent_t a, b;
  CHECK(cudaEventCreate(&a));
  CHECK(cudaEventCreate(&b));
  std::vector<double> gbps;
  for (int r = 0; r < reps + 3; ++r) {
    if (contend) {
      for (int i = 0; i < 4; ++i)
        CopyKernel<<<264, 512, 0, k>>>(reinterpret_cast<const uint4*>(dev2),
                                       reinterpret_cast<uint4*>(dev2 + bytes), bytes / 16);
    }
    CHECK(cudaEventRecord(a, s));
    const uint64_t piece = bytes / pieces;
    for (int p = 0; p < pieces; ++p) {
      const uint64_t n = p == pieces - 1 ? bytes - piece * p : piece;
      CHECK(cudaMemcpyAsync(dev + piece * p, host + piece * p, n, cudaMemcpyHostToDevice, s));
    }
    CHECK(cudaEventRecord(b, s));
    CHECK(cudaDeviceSynchronize());
    float ms = 0;
    CHECK(cudaEventElapsedTime(&ms, a, b));
    if (r >= 3) gbps.push_back(double(bytes) / (double(ms) * 1e6));
  }
  CHECK(cudaEventDestroy(a));
  CHECK(cudaEventDestroy(b));
  return Median(gbps);
}

}  // namespace

int main() {
  CHECK(cudaSetDeviceFlags(cudaDeviceMapHost));
  const uint64_t max_bytes = 128 * kMiB;
  uint8_t *dev = nullptr, *dev2 = nullptr;
  CHECK(cudaMalloc(&dev, max_bytes));
  CHECK(cudaMalloc(&dev2, 2 * max_bytes));
  cudaStream_t s, k;
  CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  CHECK(cudaStreamCreateWithFlags(&k, cudaStreamNonBlocking));

  std::vector<Case> cases;
  uint8_t* malloc_host = nullptr;
  CHECK(cudaMallocHost(&malloc_host, max_bytes));
  std::memset(malloc_host, 1, max_bytes);
  cases.push_back({"cudaMallocHost", malloc_host});

  const long huge0 = AnonHugeKb();
  uint8_t* small_pages = MapTouched(max_bytes, MADV_NOHUGEPAGE);
  CHECK(
      cudaHostRegister(small_pages, max_bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  cases.push_back({"register 4KiB pages", small_pages});

  uint8_t* huge = MapTouched(max_bytes, MADV_HUGEPAGE);
  const long huge1 = AnonHugeKb();
  CHECK(cudaHostRegister(huge, max_bytes, cudaHostRegisterPortable | cudaHostRegisterMapped));
  cases.push_back({"register THP", huge});

  // The L1 pool's way: one mapping, 256 MiB slabs, each registered alone.
  const uint64_t slab = 256 * kMiB, pool = 4 * slab;
  void* raw = mmap(nullptr, pool, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return 2;
  auto* pool_base = static_cast<uint8_t*>(raw);
  for (uint64_t s0 = 0; s0 < pool; s0 += slab) {
    madvise(pool_base + s0, slab, MADV_HUGEPAGE);
    for (uint64_t i = 0; i < slab; i += 4096) pool_base[s0 + i] = 1;
    CHECK(
        cudaHostRegister(pool_base + s0, slab, cudaHostRegisterPortable | cudaHostRegisterMapped));
  }
  const long huge2 = AnonHugeKb();
  cases.push_back({"L1 pool slab (THP hint)", pool_base + slab + 32 * kMiB});
  std::printf(
      "pool base %p (2 MiB aligned: %s); AnonHugePages kB: start %ld, +THP buffer %ld, "
      "+pool %ld\n",
      raw, uintptr_t(raw) % (2 * kMiB) == 0 ? "yes" : "no", huge0, huge1, huge2);
  {
    std::ifstream thp("/sys/kernel/mm/transparent_hugepage/enabled");
    std::string line;
    std::getline(thp, line);
    std::printf("THP enabled: %s\n", line.c_str());
  }

  std::printf("%-26s %8s %7s %9s %9s\n", "source", "MiB", "pieces", "alone", "+kernel");
  for (const Case& c : cases) {
    for (uint64_t mib : {3ull, 10ull, 32ull, 128ull}) {
      for (int pieces : {1, 4, 16}) {
        if (mib == 3 && pieces == 16) continue;
        const double alone = Time(c.host, dev, dev2, mib * kMiB, pieces, false, s, k);
        const double busy = Time(c.host, dev, dev2, mib * kMiB, pieces, true, s, k);
        std::printf("%-26s %8llu %7d %9.1f %9.1f\n", c.name, (unsigned long long)mib, pieces, alone,
                    busy);
      }
    }
  }
  return 0;
}
