// A completion board (kvstash/completion_board.h) on a device, for both
// sides: the engine maps its board for its GPU, kvstashd maps the engine's
// board for each GPU it copies on, and both enqueue the same stream
// operations on its words. The driver's stream memory operations are
// reached through the runtime (driver_api.h).
#pragma once

#include <cstdint>

#include "kvstash/status.h"

namespace kvstash::cuda {

// Registers [base, base + bytes) device-mapped (cudaHostRegister portable |
// mapped) for `device` and returns the address its streams use; Unavailable
// when the driver has no stream memory operations. UnmapBoard undoes it.
Result<uint8_t*> MapBoard(uint8_t* base, uint64_t bytes, int device);
void UnmapBoard(uint8_t* base);

// `stream` (a cudaStream_t) waits until the word at `device_word` is >=
// `value` (cuStreamWaitValue32 GEQ), or writes `value` there
// (cuStreamWriteValue32) once every earlier write of the stream is done, so
// that whoever sees the value sees the data.
Status StreamWaitBoardWord(void* stream, uint64_t device_word, uint32_t value);
Status StreamWriteBoardWord(void* stream, uint64_t device_word, uint32_t value);

}  // namespace kvstash::cuda
