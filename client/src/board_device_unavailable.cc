// Completion boards in a libkvstash built without CUDA (no kvstash::cuda):
// CPU only, so kvstash/cuda/board_device.h answers Unavailable.
#include "kvstash/cuda/board_device.h"

namespace kvstash::cuda {

namespace {
Status NoCuda() {
  return Status::Unavailable(
      "libkvstash was built without CUDA: completion boards are CPU-only here");
}
}  // namespace

Result<uint8_t*> MapBoard(uint8_t*, uint64_t, int) { return NoCuda(); }
void UnmapBoard(uint8_t*) {}
Status StreamWaitBoardWord(void*, uint64_t, uint32_t) { return NoCuda(); }
Status StreamWriteBoardWord(void*, uint64_t, uint32_t) { return NoCuda(); }

}  // namespace kvstash::cuda
