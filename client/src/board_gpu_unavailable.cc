// Completion boards in a build without CUDA: CPU only.
#include "board_gpu.h"

namespace kvstash::client {

namespace {
Status NoCuda() {
  return Status::Unavailable(
      "libkvstash was built without CUDA: completion boards are CPU-only here");
}
}  // namespace

Result<uint8_t*> MapBoardForGpu(uint8_t*, uint64_t, int) { return NoCuda(); }
void UnmapBoardForGpu(uint8_t*) {}
Status StreamWaitWord(void*, uint8_t*, uint32_t) { return NoCuda(); }
Status StreamWriteWord(void*, uint8_t*, uint32_t) { return NoCuda(); }

}  // namespace kvstash::client
