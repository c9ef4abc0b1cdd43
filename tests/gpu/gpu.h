// What the GPU tests share: skipping, with the reason, where no GPU is
// usable, and starting a kvstashd on the cuda backend.
#pragma once

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "daemon_process.h"
#include "kvstash/cuda/devices.h"

namespace kvstash::testing {

// Empty when a CUDA device is usable; otherwise why not.
inline std::string NoGpuReason() {
  Result<int> count = cuda::DeviceCount();
  return count.ok() ? "" : count.status().message();
}

#define KVSTASH_SKIP_WITHOUT_GPU()                                                    \
  do {                                                                                \
    const std::string kvstash_no_gpu_ = ::kvstash::testing::NoGpuReason();            \
    if (!kvstash_no_gpu_.empty()) GTEST_SKIP() << "needs a GPU: " << kvstash_no_gpu_; \
  } while (0)

// kvstashd --backend cuda with small chunks (64 tokens) and a staging ring of
// two Llama-sized test chunks per direction, so that batches are split.
inline Result<std::unique_ptr<DaemonProcess>> StartCudaDaemon(const std::string& mode,
                                                              std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--backend",      "cuda", "--transfer-mode", mode,
                                   "--chunk-tokens", "64",   "--l1-gb",         "1",
                                   "--l1-slice-mb",  "32",   "--staging-mb",    "32"};
  args.insert(args.end(), extra.begin(), extra.end());
  return DaemonProcess::Start(args);
}

}  // namespace kvstash::testing
