// Raw pinned copies.
#include "raw_copy.h"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <vector>

#include "kvstash/cuda/cuda_status.h"

namespace kvstash::bench {

Result<RawCopy> RawCopy::Create(uint64_t bytes) {
  RawCopy raw;
  for (cuda::PinnedHostBuffer* buffer : {&raw.host_out_, &raw.host_in_}) {
    Result<cuda::PinnedHostBuffer> allocated = cuda::PinnedHostBuffer::Allocate(bytes);
    if (!allocated.ok()) return allocated.status();
    *buffer = std::move(*allocated);
    std::memset(buffer->host(), 0x5A, bytes);  // touched and never zero
  }
  for (cuda::DeviceBuffer* buffer : {&raw.device_out_, &raw.device_in_}) {
    Result<cuda::DeviceBuffer> allocated = cuda::DeviceBuffer::Allocate(bytes);
    if (!allocated.ok()) return allocated.status();
    *buffer = std::move(*allocated);
    KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemset(buffer->data(), 0xA5, bytes));
  }
  for (cuda::Stream* stream : {&raw.down_, &raw.up_}) {
    Result<cuda::Stream> created = cuda::Stream::Create();
    if (!created.ok()) return created.status();
    *stream = std::move(*created);
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaDeviceSynchronize());
  return raw;
}

Status RawCopy::Run(Way way, uint64_t bytes) {
  const uint64_t piece = host_out_.size();
  for (uint64_t done = 0; done < bytes; done += piece) {
    const uint64_t n = std::min(piece, bytes - done);
    if (way != Way::kHostToDevice) {
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(host_out_.host(), device_out_.data(), n,
                                                   cudaMemcpyDeviceToHost, down_.get()));
    }
    if (way != Way::kDeviceToHost) {
      KVSTASH_CUDA_RETURN_IF_ERROR(cudaMemcpyAsync(device_in_.data(), host_in_.host(), n,
                                                   cudaMemcpyHostToDevice, up_.get()));
    }
  }
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(down_.get()));
  KVSTASH_CUDA_RETURN_IF_ERROR(cudaStreamSynchronize(up_.get()));
  return Status::Ok();
}

Result<double> RawCopy::Seconds(Way way, uint64_t bytes) {
  const auto start = std::chrono::steady_clock::now();
  KVSTASH_RETURN_IF_ERROR(Run(way, bytes));
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Result<double> RawCopy::MedianSeconds(Way way, uint64_t bytes, int reps) {
  KVSTASH_RETURN_IF_ERROR(Run(way, bytes));  // warm-up
  std::vector<double> seconds;
  for (int r = 0; r < reps; ++r) {
    Result<double> one = Seconds(way, bytes);
    if (!one.ok()) return one.status();
    seconds.push_back(*one);
  }
  std::nth_element(seconds.begin(), seconds.begin() + seconds.size() / 2, seconds.end());
  return seconds[seconds.size() / 2];
}

}  // namespace kvstash::bench
