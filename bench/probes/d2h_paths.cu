// Whether stores (device to host) would gain from other GPUs' PCIe links as
// retrieves do: GPU 0's bytes to pinned host memory over its own link,
// against the same bytes cut in pieces shared round robin between its own
// link and k NVLink peers (GPU 0 -> the peer's staging over NVLink, pulled by
// the peer's copy engine -> host over the peer's link, the peer's NVLink
// copy of one piece overlapping its host copy of the one before), for
// k = 1, 2, 3 (as many peers with peer access as there are). Plain CUDA
// runtime, no kvstash. Every byte that lands is checked against the
// pattern GPU 0 wrote.
//
//   kvstash_d2h_paths_probe [--mib 2048] [--piece-mib 16] [--reps 5]
//
// Prints one line per path count: GB/s (median of the reps, host clock
// around enqueue and completion) and the ratio to GPU 0's own link; exits
// 1 on a CUDA error or a wrong byte, 2 without a GPU.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#define CHECK(x)                                                                              \
  do {                                                                                        \
    cudaError_t e = (x);                                                                      \
    if (e != cudaSuccess) {                                                                   \
      std::fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e)); \
      std::exit(1);                                                                           \
    }                                                                                         \
  } while (0)

namespace {

constexpr int kMaxPeers = 3;
constexpr int kSlots = 4;  // pieces in flight in each peer's staging

__host__ __device__ uint32_t Pattern(uint64_t word) {
  return uint32_t(word * 2654435761u) ^ uint32_t(word >> 32) ^ 0x9e3779b9u;
}

// Grid: enough blocks of 256 threads to stride over `words`.
__global__ void FillKernel(uint32_t* __restrict__ out, uint64_t words) {
  for (uint64_t w = blockIdx.x * uint64_t(blockDim.x) + threadIdx.x; w < words;
       w += uint64_t(gridDim.x) * blockDim.x) {
    out[w] = Pattern(w);
  }
}

// What a peer needs to carry GPU 0's pieces to the host.
struct Peer {
  int device = 0;
  bool nvlink = false;
  uint8_t* staging = nullptr;   // kSlots pieces
  cudaStream_t pull = nullptr;  // GPU 0 -> staging, over NVLink
  cudaStream_t out = nullptr;   // staging -> host, over its own link
  cudaEvent_t pulled[kSlots] = {};
  cudaEvent_t landed[kSlots] = {};
};

uint64_t Arg(int argc, char** argv, const char* name, uint64_t fallback) {
  for (int i = 1; i + 1 < argc; ++i) {
    if (std::strcmp(argv[i], name) == 0) return std::strtoull(argv[i + 1], nullptr, 10);
  }
  return fallback;
}

// Enqueues the whole transfer over the own link and `paths - 1` peers and
// waits for it; returns its seconds.
double Run(uint8_t* src, uint8_t* host, uint64_t bytes, uint64_t piece, cudaStream_t own,
           std::vector<Peer>& peers, int paths) {
  for (int p = 0; p < paths - 1; ++p) {
    CHECK(cudaSetDevice(peers[p].device));
    CHECK(cudaDeviceSynchronize());
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaDeviceSynchronize());
  std::vector<int> used(peers.size(), 0);
  const auto start = std::chrono::steady_clock::now();
  uint64_t index = 0;
  for (uint64_t offset = 0; offset < bytes; offset += piece, ++index) {
    const uint64_t size = std::min(piece, bytes - offset);
    const int path = int(index % uint64_t(paths));
    if (path == 0) {
      CHECK(cudaSetDevice(0));
      CHECK(cudaMemcpyAsync(host + offset, src + offset, size, cudaMemcpyDeviceToHost, own));
      continue;
    }
    Peer& peer = peers[path - 1];
    const int slot = used[path - 1] % kSlots;
    CHECK(cudaSetDevice(peer.device));
    // The slot is refilled only once its last piece reached the host.
    if (used[path - 1] >= kSlots) CHECK(cudaStreamWaitEvent(peer.pull, peer.landed[slot], 0));
    ++used[path - 1];
    uint8_t* staged = peer.staging + uint64_t(slot) * piece;
    CHECK(cudaMemcpyPeerAsync(staged, peer.device, src + offset, 0, size, peer.pull));
    CHECK(cudaEventRecord(peer.pulled[slot], peer.pull));
    CHECK(cudaStreamWaitEvent(peer.out, peer.pulled[slot], 0));
    CHECK(cudaMemcpyAsync(host + offset, staged, size, cudaMemcpyDeviceToHost, peer.out));
    CHECK(cudaEventRecord(peer.landed[slot], peer.out));
  }
  CHECK(cudaSetDevice(0));
  CHECK(cudaStreamSynchronize(own));
  for (int p = 0; p < paths - 1; ++p) {
    CHECK(cudaSetDevice(peers[p].device));
    CHECK(cudaStreamSynchronize(peers[p].out));
  }
  CHECK(cudaSetDevice(0));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

// The offset of the first word of `host` that is not the pattern, or `bytes`.
uint64_t FirstWrong(const uint8_t* host, uint64_t bytes) {
  const uint32_t* words = reinterpret_cast<const uint32_t*>(host);
  for (uint64_t w = 0; w < bytes / 4; ++w) {
    if (words[w] != Pattern(w)) return w * 4;
  }
  return bytes;
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t mib = 1 << 20;
  const uint64_t bytes = std::max<uint64_t>(1, Arg(argc, argv, "--mib", 2048)) * mib;
  const uint64_t piece = std::max<uint64_t>(1, Arg(argc, argv, "--piece-mib", 16)) * mib;
  const int reps = int(std::max<uint64_t>(1, Arg(argc, argv, "--reps", 5)));
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices < 1) {
    std::fprintf(stderr, "no GPU visible\n");
    return 2;
  }
  cudaDeviceProp properties{};
  CHECK(cudaGetDeviceProperties(&properties, 0));
  std::vector<Peer> peers;
  std::string peer_text;
  for (int d = 1; d < devices && int(peers.size()) < kMaxPeers; ++d) {
    int to = 0, from = 0;
    CHECK(cudaDeviceCanAccessPeer(&to, d, 0));
    CHECK(cudaDeviceCanAccessPeer(&from, 0, d));
    if (!to || !from) {
      peer_text += " GPU " + std::to_string(d) + " (no peer access: left out)";
      continue;
    }
    // As kvstashd decides it: a peer link with native atomics both ways is NVLink.
    int atomics_to = 0, atomics_from = 0;
    CHECK(cudaDeviceGetP2PAttribute(&atomics_to, cudaDevP2PAttrNativeAtomicSupported, d, 0));
    CHECK(cudaDeviceGetP2PAttribute(&atomics_from, cudaDevP2PAttrNativeAtomicSupported, 0, d));
    Peer peer;
    peer.device = d;
    peer.nvlink = atomics_to && atomics_from;
    CHECK(cudaSetDevice(d));
    cudaError_t enabled = cudaDeviceEnablePeerAccess(0, 0);
    if (enabled == cudaErrorPeerAccessAlreadyEnabled) enabled = cudaSuccess;
    CHECK(enabled);
    CHECK(cudaMalloc(reinterpret_cast<void**>(&peer.staging), kSlots * piece));
    CHECK(cudaStreamCreateWithFlags(&peer.pull, cudaStreamNonBlocking));
    CHECK(cudaStreamCreateWithFlags(&peer.out, cudaStreamNonBlocking));
    for (int s = 0; s < kSlots; ++s) {
      CHECK(cudaEventCreateWithFlags(&peer.pulled[s], cudaEventDisableTiming));
      CHECK(cudaEventCreateWithFlags(&peer.landed[s], cudaEventDisableTiming));
    }
    CHECK(cudaSetDevice(0));
    enabled = cudaDeviceEnablePeerAccess(d, 0);
    if (enabled == cudaErrorPeerAccessAlreadyEnabled) enabled = cudaSuccess;
    CHECK(enabled);
    peer_text += " GPU " + std::to_string(d) + (peer.nvlink ? " (NVLink)" : " (PCIe peer)");
    peers.push_back(peer);
  }

  CHECK(cudaSetDevice(0));
  uint8_t* src = nullptr;
  CHECK(cudaMalloc(reinterpret_cast<void**>(&src), bytes));
  FillKernel<<<1024, 256>>>(reinterpret_cast<uint32_t*>(src), bytes / 4);
  CHECK(cudaGetLastError());
  uint8_t* host = nullptr;
  // Portable: every GPU's copy engines write it.
  CHECK(cudaHostAlloc(reinterpret_cast<void**>(&host), bytes, cudaHostAllocPortable));
  cudaStream_t own = nullptr;
  CHECK(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking));
  CHECK(cudaDeviceSynchronize());

  std::printf("GPU 0 %s; peers:%s\n", properties.name,
              peer_text.empty() ? " none" : peer_text.c_str());
  std::printf(
      "%llu MiB from GPU 0 to pinned host memory in pieces of %llu MiB, round robin over "
      "the paths; GB/s median of %d\n",
      static_cast<unsigned long long>(bytes / mib), static_cast<unsigned long long>(piece / mib),
      reps);
  std::printf("%-28s %9s %11s  %s\n", "paths", "GB/s", "x one link", "bytes");
  int status = 0;
  double one_link = 0;
  for (int paths = 1; paths <= int(peers.size()) + 1; ++paths) {
    std::string name = "own link";
    for (int p = 0; p < paths - 1; ++p) name += " + GPU " + std::to_string(peers[p].device);
    // The first run lands on zeros and is checked; the timed ones follow.
    std::memset(host, 0, bytes);
    (void)Run(src, host, bytes, piece, own, peers, paths);
    const uint64_t wrong = FirstWrong(host, bytes);
    std::vector<double> seconds;
    for (int r = 0; r < reps; ++r)
      seconds.push_back(Run(src, host, bytes, piece, own, peers, paths));
    std::sort(seconds.begin(), seconds.end());
    const double gbps = double(bytes) / seconds[seconds.size() / 2] / 1e9;
    if (paths == 1) one_link = gbps;
    std::string check = "ok";
    if (wrong != bytes) {
      check = "WRONG from byte " + std::to_string(wrong);
      status = 1;
    }
    std::printf("%-28s %9.2f %11.3f  %s\n", name.c_str(), gbps, one_link > 0 ? gbps / one_link : 0,
                check.c_str());
  }
  return status;
}
