// The bytes of a copy fence (docs/protocol.md "The copy fence"), which
// libkvstash and kvstashd lock: a POSIX shared memory object of no size,
// used only for its byte-range locks.
//
//   byte 0              the engine's: a read lock while its client lives
//   byte `request id`   a request's: kvstashd's read lock while it copies
//                       it, the engine's write lock once it gave it up
//   byte 2^63 - 1       kvstashd's: a process-associated (classic POSIX)
//                       read lock while it holds the fence, so that the
//                       kernel can name its process to the engine
//
// Request ids count up from 1 per client and stay far below 2^63 - 1.
#pragma once

#include <fcntl.h>
#include <sys/types.h>

#include <cstdint>
#include <limits>

namespace kvstash::fence {

inline constexpr off_t kEngineByte = 0;
inline constexpr off_t kDaemonByte = std::numeric_limits<off_t>::max();

// Byte offsets must fit off_t.
inline off_t RequestByte(uint64_t request_id) {
  return off_t(request_id & uint64_t(std::numeric_limits<off_t>::max()));
}

// A lock of `type` (F_RDLCK, F_WRLCK, F_UNLCK) on one byte of the fence.
inline struct flock OneByte(short type, off_t byte) {
  struct flock lock {};
  lock.l_type = type;
  lock.l_whence = SEEK_SET;
  lock.l_start = byte;
  lock.l_len = 1;
  return lock;
}

}  // namespace kvstash::fence
