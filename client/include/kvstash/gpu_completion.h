// GPU-side completion: an engine's CUDA stream waits for a retrieve's data,
// and a store's copy waits for the engine's stream, with no CPU thread of
// the engine blocking (docs/protocol.md "GPU-side completion").
//
//   auto board = kvstash::CompletionBoard::Create(256, /*gpu=*/0).value();
//   options.board = board->shm();                  // then RegisterKV(options)
//   auto load = client->RetrieveOnStream(reg.id, chunks, *board, stream, 0, 0,
//                                        /*layer_ranges=*/4).value();
//   board->WaitLayerRange(stream, load.signal, 0); // before layer range 0's attention
//   ...
//   outcomes = load.outcomes.get();                // the CPU reply, per chunk
//
// What an engine must check before it trusts the KV: the stream waits order
// the data only. A chunk the daemon did not retrieve (missing, failed, cut
// off by the deadline) leaves its blocks unwritten, while its slots are
// still released so that nothing hangs. Each slot's status word (0 = Ok,
// else the ErrorCode) says whether every chunk of that request was
// retrieved; it is final once the request's last slot is released. The
// per-chunk outcomes of the reply are authoritative: an engine that keeps
// the reply off its critical path still checks it before it reports the
// request's tokens as computed (vLLM: get_block_ids_with_load_errors).
#pragma once

#include <cstdint>
#include <future>
#include <memory>
#include <mutex>
#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/host_memory.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"

namespace kvstash {

// The board an engine shares with kvstashd: slots in POSIX shared memory
// (layout in kvstash/completion_board.h), mapped for one GPU's streams.
// Thread-safe. Must outlive every registration that names it and every
// stream operation enqueued on it.
class CompletionBoard {
 public:
  // slots: 1 to 4096. gpu >= 0: registers the board device-mapped
  // (cudaHostRegister) for that GPU's streams, and checks that the driver
  // has stream memory operations (Unavailable otherwise, or without CUDA).
  // gpu < 0: CPU only (host backend: engines poll the words).
  static Result<std::unique_ptr<CompletionBoard>> Create(uint32_t slots, int gpu = -1);
  ~CompletionBoard();
  CompletionBoard(const CompletionBoard&) = delete;
  CompletionBoard& operator=(const CompletionBoard&) = delete;

  // Pass as RegisterOptions::board.
  HostShm shm() const { return HostShm{memory_.name(), memory_.size()}; }
  uint32_t slots() const { return slots_; }

  // Slots for one request and the next sequence number. ResourceExhausted
  // when no `count` adjacent slots are free.
  Result<BoardSignal> Take(uint32_t count);
  // Returns a request's slots once its reply came (the daemon wrote them).
  void Give(const BoardSignal& signal);

  // CPU view and release of a slot's words.
  uint32_t value(uint32_t slot) const;
  uint32_t status(uint32_t slot) const;
  // Whether slot `slot` of the signal is released (value >= sequence).
  bool Released(const BoardSignal& signal, uint32_t k) const;
  // Writes status, then the value: releases whatever waits on the slot.
  void Release(uint32_t slot, uint32_t sequence, uint32_t status);
  // Releases slots signal.slot + k for k in [first, signal.count): every
  // status word first, then every value (kvstash/completion_board.h).
  void Release(const BoardSignal& signal, uint32_t first, uint32_t status);

  // Stream operations (gpu >= 0 only); `stream` is a cudaStream_t.
  // Makes the stream wait until slot signal.slot + k is released.
  Status WaitLayerRange(void* stream, const BoardSignal& signal, uint32_t k) const;
  // Makes the stream wait for every slot of a retrieve (its last range).
  Status WaitAll(void* stream, const BoardSignal& signal) const {
    return WaitLayerRange(stream, signal, signal.count - 1);
  }
  // Store: the stream releases the gate (slot) when it gets there.
  Status SignalGate(void* stream, const BoardSignal& signal) const;
  // Store: makes the stream wait until the engine's blocks may be reused.
  Status WaitReusable(void* stream, const BoardSignal& signal) const {
    return WaitLayerRange(stream, signal, 1);
  }

 private:
  CompletionBoard(HostKvMemory memory, uint32_t slots)
      : memory_(std::move(memory)), slots_(slots), taken_(slots, false) {}

  void ReleaseSlots(const uint32_t* slots, uint32_t count, uint32_t sequence, uint32_t status);

  HostKvMemory memory_;
  const uint32_t slots_;
  int gpu_ = -1;
  uint8_t* device_base_ = nullptr;  // where streams address the board
  Mutex mutex_;
  uint32_t next_sequence_ KVSTASH_GUARDED_BY(mutex_) = 1;
  std::vector<bool> taken_ KVSTASH_GUARDED_BY(mutex_);
};

// A store or retrieve signalling on a board: its slots, and the CPU reply.
struct GpuTransfer {
  BoardSignal signal;
  std::future<Result<std::vector<ChunkOutcome>>> outcomes;
};

}  // namespace kvstash
