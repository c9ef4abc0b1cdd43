// The disk tier's I/O engine: one thread per ring running the tier's jobs
// and submitting their transfers to io_uring, many chunks in flight at
// once. Where io_uring is unavailable (an old kernel, or a container whose
// seccomp profile refuses io_uring_setup) it falls back to a pool of
// threads doing the same transfers with preadv/pwritev, one at a time each.
// Internal to kvstash::tiers.
//
// Jobs and transfer callbacks run on the engine's threads, never on a
// caller's. Transfer() may only be called from a job or a callback.
//
// Thread-safe: any thread may Post. The destructor runs every queued job and
// waits for every transfer in flight before it returns.
#pragma once

#include <sys/types.h>
#include <sys/uio.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace kvstash::tiers::internal {

struct IoEngineOptions {
  bool use_io_uring = true;
  uint32_t rings = 1;         // io_uring: a thread each; jobs go round-robin
  uint32_t depth = 8;         // io_uring: transfers in flight per ring
  uint32_t pool_threads = 4;  // fallback: threads of the pool
  std::string name = "kvstash-l2";
};

class IoEngine {
 public:
  // `res`: the bytes moved (all of them: short transfers are continued), or
  // a negative errno. Fewer bytes than asked only when a read hit the end
  // of the file.
  using TransferDone = std::function<void(int64_t res)>;

  explicit IoEngine(const IoEngineOptions& options);
  ~IoEngine();
  IoEngine(const IoEngine&) = delete;
  IoEngine& operator=(const IoEngine&) = delete;

  // "io_uring" or "thread pool": what runs the transfers.
  const char* kind() const;
  // Why io_uring is not used, when it was asked for and refused ("" else).
  const std::string& fallback_reason() const;

  void Post(std::function<void()> job);
  // Reads or writes the buffers `iov` at `offset` of `fd`; `done` runs when
  // all of it moved or it failed. The buffers must stay valid until then.
  void Transfer(int fd, bool write, std::vector<iovec> iov, off_t offset, TransferDone done);

  class Impl;

 private:
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::tiers::internal
