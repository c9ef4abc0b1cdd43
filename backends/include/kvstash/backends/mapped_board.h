// An engine's completion board (kvstash/completion_board.h), opened in the
// daemon: the engine's POSIX shared memory mapped here and, with the CUDA
// backend, registered device-mapped so that the lanes' streams write its
// words. Owned by one registration; lanes hold it by shared_ptr while they
// signal on it.
//
// Thread-safe: CPU writes and reads are single atomic words, run under the
// memory fault guard (an engine that shrinks its board after registering
// makes them fail, not the daemon crash); Abandon() may come from any thread.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "kvstash/backends/peer_credentials.h"
#include "kvstash/status.h"

namespace kvstash::backends {

// How a backend makes a board reachable from its copy engines.
struct BoardMapping {
  uint8_t* device_base = nullptr;  // the board's address for GPU streams (null: host backend)
  std::function<void()> unmap;     // undoes the mapping; may be empty
};

class MappedBoard {
 public:
  // Opens, checks (name, size: 1 to kMaxBoardSlots slots of kBoardSlotBytes,
  // the peer's own permissions) and maps the engine's board; `map` then makes
  // it reachable from the backend's streams.
  static Result<std::shared_ptr<MappedBoard>> Open(
      const std::string& shm_name, uint64_t size_bytes,
      const std::optional<PeerCredentials>& opener,
      const std::function<Result<BoardMapping>(uint8_t*, uint64_t)>& map);
  ~MappedBoard();
  MappedBoard(const MappedBoard&) = delete;
  MappedBoard& operator=(const MappedBoard&) = delete;

  uint32_t slots() const { return slots_; }
  const std::string& name() const { return name_; }
  // CPU writes; false when the engine's memory is gone (it shrank its
  // board). Release: every slot of a request, by the release rule
  // (ReleaseBoardSlots: statuses first, then values). Preset: the status
  // every slot carries before its copy starts. WriteValue: one slot whose
  // status was preset, released in order after the copy it signals.
  bool Release(const std::vector<uint32_t>& slots, uint32_t sequence, uint32_t status);
  bool Preset(const std::vector<uint32_t>& slots, uint32_t status);
  bool WriteValue(uint32_t slot, uint32_t sequence);
  // The value word, or nullopt when the board's memory is gone.
  std::optional<uint32_t> Value(uint32_t slot) const;
  // Where a GPU stream writes or waits on slot `slot`'s value word.
  uint64_t device_value(uint32_t slot) const;
  bool on_device() const { return device_base_ != nullptr; }

  // The registration went away (unregistered, or its engine judged dead):
  // nothing will set the engine's words any more.
  void Abandon() { abandoned_.store(true, std::memory_order_release); }
  bool abandoned() const { return abandoned_.load(std::memory_order_acquire); }

 private:
  MappedBoard() = default;
  bool Write(uint32_t slot, uint32_t offset, uint32_t value);

  std::string name_;
  uint8_t* base_ = nullptr;
  uint64_t bytes_ = 0;
  uint32_t slots_ = 0;
  uint8_t* device_base_ = nullptr;
  std::function<void()> unmap_;
  std::atomic<bool> abandoned_{false};
};

}  // namespace kvstash::backends
