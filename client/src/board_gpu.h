// The CUDA side of a completion board in the engine: device-mapping it and
// the stream operations on its words (board_gpu_cuda.cc), or Unavailable
// in a build without CUDA (board_gpu_unavailable.cc).
#pragma once

#include <cstdint>

#include "kvstash/status.h"

namespace kvstash::client {

// cudaHostRegister (device-mapped) of [base, base + bytes) for `gpu`;
// returns the address streams use.
Result<uint8_t*> MapBoardForGpu(uint8_t* base, uint64_t bytes, int gpu);
void UnmapBoardForGpu(uint8_t* base);
// cuStreamWaitValue32(GEQ) / cuStreamWriteValue32 on a board word.
Status StreamWaitWord(void* stream, uint8_t* device_word, uint32_t value);
Status StreamWriteWord(void* stream, uint8_t* device_word, uint32_t value);

}  // namespace kvstash::client
