// The C API of completion boards (kvstash.h, "GPU-side completion").
#include <cstddef>

#include "c_api_internal.h"
#include "kvstash/completion_board.h"
#include "kvstash/gpu_completion.h"

static_assert(KVSTASH_MAX_BOARD_SLOTS == kvstash::kMaxBoardSlots);
static_assert(KVSTASH_MAX_LAYER_RANGES == kvstash::kMaxLayerRanges);
// kvstash_board_signal is the C spelling of kvstash::BoardSignal.
static_assert(sizeof(kvstash_board_signal) == sizeof(kvstash::BoardSignal));
static_assert(offsetof(kvstash_board_signal, slot) == offsetof(kvstash::BoardSignal, slot));
static_assert(offsetof(kvstash_board_signal, count) == offsetof(kvstash::BoardSignal, count));
static_assert(offsetof(kvstash_board_signal, sequence) == offsetof(kvstash::BoardSignal, sequence));

namespace kvstash::capi {

HostShm BoardShm(const kvstash_board* board) { return board->board->shm(); }

}  // namespace kvstash::capi

extern "C" {

uint32_t kvstash_max_board_slots(void) { return kvstash::kMaxBoardSlots; }

uint32_t kvstash_max_layer_ranges(void) { return kvstash::kMaxLayerRanges; }

uint32_t kvstash_layer_range_begin(uint32_t num_layers, uint32_t ranges, uint32_t k) {
  if (ranges == 0 || k > ranges) return 0;
  return kvstash::LayerRangeBegin(num_layers, ranges, k);
}

kvstash_status kvstash_board_create(kvstash_client* client, uint32_t slots, int gpu,
                                    kvstash_board** board) {
  auto finish = [client](const kvstash::Status& status) {
    return client ? client->Finish(status) : kvstash::capi::ToC(status.code());
  };
  if (board == nullptr)
    return finish(kvstash::Status::InvalidArgument("the kvstash_board** is NULL"));
  *board = nullptr;
  try {
    auto created = kvstash::CompletionBoard::Create(slots, gpu);
    if (!created.ok()) return finish(created.status());
    *board = new kvstash_board{std::move(*created)};
    return finish(kvstash::Status::Ok());
  } catch (const std::exception& e) {
    return finish(kvstash::Status::Internal(std::string("unexpected exception: ") + e.what()));
  }
}

void kvstash_board_destroy(kvstash_board* board) { delete board; }

kvstash_status kvstash_board_wait(kvstash_client* client, const kvstash_board* board, void* stream,
                                  const kvstash_board_signal* signal, uint32_t k) {
  const kvstash::Status status =
      board == nullptr || signal == nullptr
          ? kvstash::Status::InvalidArgument("kvstash_board_wait: board or signal is NULL")
          : board->board->WaitLayerRange(stream, {signal->slot, signal->count, signal->sequence},
                                         k);
  return client ? client->Finish(status) : kvstash::capi::ToC(status.code());
}

int kvstash_board_released(const kvstash_board* board, const kvstash_board_signal* signal,
                           uint32_t k) {
  if (board == nullptr || signal == nullptr || k >= signal->count) return 0;
  return board->board->Released({signal->slot, signal->count, signal->sequence}, k) ? 1 : 0;
}

uint32_t kvstash_board_status(const kvstash_board* board, uint32_t slot) {
  return board == nullptr ? 0 : board->board->status(slot);
}

void kvstash_board_release(kvstash_board* board, uint32_t slot, uint32_t sequence,
                           uint32_t status) {
  if (board != nullptr) board->board->Release(slot, sequence, status);
}

}  // extern "C"
