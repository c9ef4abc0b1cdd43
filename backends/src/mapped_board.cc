// Opening an engine's completion board and touching its words from the CPU.
#include "kvstash/backends/mapped_board.h"

#include <sys/mman.h>

#include <cerrno>
#include <cstring>

#include "kvstash/backends/client_shm.h"
#include "kvstash/backends/memory_fault_guard.h"
#include "kvstash/completion_board.h"

namespace kvstash::backends {

namespace {

struct WordAccess {
  uint32_t* word;
  uint32_t value;
  bool store;
};

void AccessWord(void* arg) {
  auto* access = static_cast<WordAccess*>(arg);
  if (access->store) {
    __atomic_store_n(access->word, access->value, __ATOMIC_RELEASE);
  } else {
    access->value = __atomic_load_n(access->word, __ATOMIC_ACQUIRE);
  }
}

}  // namespace

Result<std::shared_ptr<MappedBoard>> MappedBoard::Open(
    const std::string& shm_name, uint64_t size_bytes, const std::optional<PeerCredentials>& opener,
    const std::function<Result<BoardMapping>(uint8_t*, uint64_t)>& map) {
  if (size_bytes == 0 || size_bytes % kBoardSlotBytes != 0 ||
      size_bytes / kBoardSlotBytes > kMaxBoardSlots) {
    return Status::InvalidArgument("completion board " + shm_name + " declares " +
                                   std::to_string(size_bytes) + " bytes; a board holds 1 to " +
                                   std::to_string(kMaxBoardSlots) + " slots of " +
                                   std::to_string(kBoardSlotBytes) + " bytes");
  }
  Result<ClientShmFd> opened =
      OpenClientShm({"completion board", shm_name, /*writable=*/true, size_bytes, opener});
  if (!opened.ok()) return opened.status();
  void* base = mmap(nullptr, size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, opened->fd(), 0);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of completion board " + shm_name +
                             " failed: " + std::strerror(errno));
  }
  MemoryFaultGuard::Install();
  std::shared_ptr<MappedBoard> board(new MappedBoard());
  board->name_ = shm_name;
  board->base_ = static_cast<uint8_t*>(base);
  board->bytes_ = size_bytes;
  board->slots_ = uint32_t(size_bytes / kBoardSlotBytes);
  Result<BoardMapping> mapped = map(board->base_, size_bytes);
  if (!mapped.ok()) return mapped.status();  // the destructor unmaps
  board->device_base_ = mapped->device_base;
  board->unmap_ = std::move(mapped->unmap);
  return board;
}

MappedBoard::~MappedBoard() {
  if (unmap_) unmap_();
  if (base_ != nullptr) munmap(base_, bytes_);
}

bool MappedBoard::Write(uint32_t slot, uint32_t offset, uint32_t value) {
  if (slot >= slots_) return false;
  uint8_t* at = base_ + uint64_t(slot) * kBoardSlotBytes + offset;
  WordAccess access{reinterpret_cast<uint32_t*>(at), value, true};
  uintptr_t fault = 0;
  return MemoryFaultGuard::RunGuarded(at, sizeof(uint32_t), AccessWord, &access, &fault);
}

bool MappedBoard::Release(const std::vector<uint32_t>& slots, uint32_t sequence, uint32_t status) {
  return ReleaseBoardSlots(slots.data(), uint32_t(slots.size()), sequence, status,
                           [this](uint32_t slot, uint32_t offset, uint32_t value) {
                             return Write(slot, offset, value);
                           });
}

bool MappedBoard::Preset(const std::vector<uint32_t>& slots, uint32_t status) {
  bool ok = true;
  for (uint32_t slot : slots) ok = Write(slot, kBoardStatusOffset, status) && ok;
  return ok;
}

bool MappedBoard::WriteValue(uint32_t slot, uint32_t sequence) {
  return Write(slot, kBoardValueOffset, sequence);
}

std::optional<uint32_t> MappedBoard::Value(uint32_t slot) const {
  if (slot >= slots_) return std::nullopt;
  uint8_t* at = base_ + uint64_t(slot) * kBoardSlotBytes + kBoardValueOffset;
  WordAccess access{reinterpret_cast<uint32_t*>(at), 0, false};
  uintptr_t fault = 0;
  if (!MemoryFaultGuard::RunGuarded(at, sizeof(uint32_t), AccessWord, &access, &fault)) {
    return std::nullopt;
  }
  return access.value;
}

uint64_t MappedBoard::device_value(uint32_t slot) const {
  return reinterpret_cast<uint64_t>(device_base_ + uint64_t(slot) * kBoardSlotBytes +
                                    kBoardValueOffset);
}

}  // namespace kvstash::backends
