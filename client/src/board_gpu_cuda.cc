// Completion boards on the GPU: kvstash::cuda's board on a device.
#include "board_gpu.h"
#include "kvstash/cuda/board_device.h"

namespace kvstash::client {

Result<uint8_t*> MapBoardForGpu(uint8_t* base, uint64_t bytes, int gpu) {
  return cuda::MapBoard(base, bytes, gpu);
}

void UnmapBoardForGpu(uint8_t* base) { cuda::UnmapBoard(base); }

Status StreamWaitWord(void* stream, uint8_t* device_word, uint32_t value) {
  return cuda::StreamWaitBoardWord(stream, reinterpret_cast<uint64_t>(device_word), value);
}

Status StreamWriteWord(void* stream, uint8_t* device_word, uint32_t value) {
  // Ordered after every earlier write of the stream (the engine's KV), so
  // the daemon's gather sees them.
  return cuda::StreamWriteBoardWord(stream, reinterpret_cast<uint64_t>(device_word), value);
}

}  // namespace kvstash::client
