// Completion boards in the engine: the shared memory, the slot allocator and
// the words' CPU and stream access.
#include "kvstash/gpu_completion.h"
#include "kvstash/runtime/thread_annotations.h"

#include <string>

#include "kvstash/completion_board.h"
#include "kvstash/cuda/board_device.h"

namespace kvstash {

namespace {
// Where GPU streams address a slot's value word.
uint64_t ValueWord(const uint8_t* device_base, uint32_t slot) {
  return reinterpret_cast<uint64_t>(device_base) + uint64_t(slot) * kBoardSlotBytes +
         kBoardValueOffset;
}
}  // namespace

Result<std::unique_ptr<CompletionBoard>> CompletionBoard::Create(uint32_t slots, int gpu) {
  if (slots == 0 || slots > kMaxBoardSlots) {
    return Status::InvalidArgument("a completion board holds 1 to " +
                                   std::to_string(kMaxBoardSlots) + " slots, not " +
                                   std::to_string(slots));
  }
  Result<HostKvMemory> memory = HostKvMemory::Create(uint64_t(slots) * kBoardSlotBytes);
  if (!memory.ok()) return memory.status();
  std::unique_ptr<CompletionBoard> board(new CompletionBoard(std::move(*memory), slots));
  if (gpu >= 0) {
    Result<uint8_t*> mapped = cuda::MapBoard(board->memory_.data(), board->memory_.size(), gpu);
    if (!mapped.ok()) return mapped.status();
    board->gpu_ = gpu;
    board->device_base_ = *mapped;
  }
  return board;
}

CompletionBoard::~CompletionBoard() {
  if (device_base_ != nullptr) cuda::UnmapBoard(memory_.data());
}

Result<BoardSignal> CompletionBoard::Take(uint32_t count) {
  if (count == 0 || count > slots_) {
    return Status::InvalidArgument("a request takes 1 to " + std::to_string(slots_) +
                                   " slots of this board, not " + std::to_string(count));
  }
  MutexLock lock(mutex_);
  for (uint32_t first = 0; first + count <= slots_; ++first) {
    uint32_t run = 0;
    while (run < count && !taken_[first + run]) ++run;
    if (run < count) {
      first += run;  // the next candidate starts past the taken slot
      continue;
    }
    for (uint32_t k = 0; k < count; ++k) taken_[first + k] = true;
    const uint32_t sequence = next_sequence_;
    // Sequences compare as (int32_t)(value - sequence) >= 0: wrapping is
    // fine, 0 is skipped (the daemon refuses it).
    next_sequence_ = next_sequence_ + 1 == 0 ? 1 : next_sequence_ + 1;
    return BoardSignal{first, count, sequence};
  }
  return Status::Exhausted("no " + std::to_string(count) +
                           " adjacent free slots on a completion board of " +
                           std::to_string(slots_) + "; wait for replies or create a larger board");
}

void CompletionBoard::Give(const BoardSignal& signal) {
  MutexLock lock(mutex_);
  for (uint32_t k = 0; k < signal.count && signal.slot + k < slots_; ++k)
    taken_[signal.slot + k] = false;
}

uint32_t CompletionBoard::value(uint32_t slot) const {
  return slot < slots_ ? LoadBoardWord(memory_.data(), slot, kBoardValueOffset) : 0;
}

uint32_t CompletionBoard::status(uint32_t slot) const {
  return slot < slots_ ? LoadBoardWord(memory_.data(), slot, kBoardStatusOffset) : 0;
}

bool CompletionBoard::Released(const BoardSignal& signal, uint32_t k) const {
  return int32_t(value(signal.slot + k) - signal.sequence) >= 0;
}

void CompletionBoard::Release(uint32_t slot, uint32_t sequence, uint32_t status) {
  ReleaseSlots(&slot, 1, sequence, status);
}

void CompletionBoard::Release(const BoardSignal& signal, uint32_t first, uint32_t status) {
  std::vector<uint32_t> slots;
  for (uint32_t k = first; k < signal.count; ++k) slots.push_back(signal.slot + k);
  ReleaseSlots(slots.data(), uint32_t(slots.size()), signal.sequence, status);
}

void CompletionBoard::ReleaseSlots(const uint32_t* slots, uint32_t count, uint32_t sequence,
                                   uint32_t status) {
  ReleaseBoardSlots(slots, count, sequence, status,
                    [this](uint32_t slot, uint32_t offset, uint32_t value) {
                      if (slot >= slots_) return false;
                      StoreBoardWord(memory_.data(), slot, offset, value);
                      return true;
                    });
}

Status CompletionBoard::WaitLayerRange(void* stream, const BoardSignal& signal, uint32_t k) const {
  if (k >= signal.count) {
    return Status::OutOfRange("layer range " + std::to_string(k) + " out of range [0, " +
                              std::to_string(signal.count) + ") of this request");
  }
  if (device_base_ == nullptr) {
    return Status::InvalidArgument("this completion board is CPU-only (created with gpu < 0)");
  }
  return cuda::StreamWaitBoardWord(stream, ValueWord(device_base_, signal.slot + k),
                                   signal.sequence);
}

Status CompletionBoard::SignalGate(void* stream, const BoardSignal& signal) const {
  if (device_base_ == nullptr) {
    return Status::InvalidArgument("this completion board is CPU-only (created with gpu < 0)");
  }
  return cuda::StreamWriteBoardWord(stream, ValueWord(device_base_, signal.slot), signal.sequence);
}

}  // namespace kvstash
