// Store and Retrieve: validate everything, reserve or pin slots in the chunk
// store, hand the copies to the device's transfer worker, answer per chunk.
// A chunk whose copy was cut off (the request's deadline, the engine giving
// it up, the daemon stopping, an unreadable board) comes back Failed with
// the cause; a stored one is not published.
#include <algorithm>
#include <string>

#include "kvstash/completion_board.h"
#include "transfers.h"

namespace kvstash::server {

namespace {

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

// GPU-side completion asked for by a Store (store = true) or Retrieve, checked
// against the registration's board; Retrieve's layer ranges sliced per group.
Result<CopySignal> MakeSignal(const Registration& reg, const BoardSignal& asked, bool store,
                              std::optional<Clock::time_point> deadline) {
  const std::string what = store ? "Store" : "Retrieve";
  if (!reg.board) {
    return Status::InvalidArgument(what + " asks for GPU-side completion but registration " +
                                   std::to_string(reg.id) +
                                   " has no completion board; pass one to RegisterKV");
  }
  const uint32_t num_layers = uint32_t(reg.request.layers.size());
  const uint32_t max_count = store ? 2 : std::min(kMaxLayerRanges, num_layers);
  if (store ? asked.count != 2 : asked.count == 0 || asked.count > max_count) {
    return Status::InvalidArgument(what + " signal names " + std::to_string(asked.count) +
                                   " slots; " +
                                   (store ? std::string("a store takes 2 (gate, done)")
                                          : "a retrieve takes 1 to " + std::to_string(max_count) +
                                                " (one per layer range, at most one per layer)"));
  }
  if (asked.slot >= reg.board->slots() || asked.count > reg.board->slots() - asked.slot) {
    return Status::OutOfRange(what + " signal names board slots [" + std::to_string(asked.slot) +
                              ", " + std::to_string(uint64_t(asked.slot) + asked.count) +
                              ") but the board of registration " + std::to_string(reg.id) +
                              " holds " + std::to_string(reg.board->slots()));
  }
  if (asked.sequence == 0) {
    return Status::InvalidArgument(what + " signal has sequence 0; sequences start at 1");
  }
  CopySignal signal;
  signal.board = reg.board;
  signal.sequence = asked.sequence;
  if (store) {
    signal.gate_slot = asked.slot;
    signal.done_slot = asked.slot + 1;
    std::weak_ptr<MappedBoard> board = reg.board;
    signal.give_up = [board, deadline] {
      auto held = board.lock();
      if (!held || held->abandoned()) {
        return Status::Cancelled("the registration ended before the store's gate was opened");
      }
      if (deadline && Clock::now() >= *deadline) {
        return Status::TimedOut("the request's deadline passed before the store's gate was opened");
      }
      return Status::Ok();
    };
    return signal;
  }
  for (uint32_t k = 0; k < asked.count; ++k) signal.range_slots.push_back(asked.slot + k);
  if (asked.count > 1) {
    for (uint32_t k = 0; k < asked.count; ++k) {
      const uint32_t begin = LayerRangeBegin(num_layers, asked.count, k);
      const uint32_t end = LayerRangeBegin(num_layers, asked.count, k + 1);
      auto& slices = signal.ranges.emplace_back();
      for (const ChunkGroup& group : reg.layout.groups()) {
        // A group's layers are in registration order: those of a range are
        // one run of them.
        const auto first = std::lower_bound(group.layers.begin(), group.layers.end(), begin);
        const auto last = std::lower_bound(first, group.layers.end(), end);
        slices.emplace_back(uint32_t(first - group.layers.begin()), uint32_t(last - first));
      }
    }
  }
  return signal;
}

}  // namespace

Transfers::Transfers(const config::ServerConfig& config, Stats& stats, DeferredReplies& deferred,
                     Backend& backend, ChunkStore& store, TierChain& tiers,
                     const Registrations& registrations)
    : stats_(stats),
      deferred_(deferred),
      store_(&store),
      tiers_(tiers),
      registrations_(registrations) {
  for (int d = 0; d < backend.num_devices(); ++d) {
    workers_.push_back(
        std::make_unique<TransferWorker>(backend, d, std::chrono::microseconds(config.busy_poll_us),
                                         stopping_copies_, deferred.trace()));
  }
}

Transfers::~Transfers() = default;

Status Transfers::CheckChunks(const Registration& reg, const std::vector<ChunkRequest>& chunks,
                              bool need_tokens) const {
  const ChunkLayout& layout = reg.layout;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRequest& chunk = chunks[i];
    // Built only for an error message: this loop runs for every chunk.
    auto where = [&] {
      return "chunk " + std::to_string(i) + " of registration " + std::to_string(reg.id);
    };
    const uint32_t num_blocks = uint32_t(chunk.block_ids.size());
    if (num_blocks > layout.blocks_per_chunk()) {
      return Status::InvalidArgument(where() + " names " + std::to_string(num_blocks) +
                                     " blocks; a chunk spans " +
                                     std::to_string(layout.blocks_per_chunk()));
    }
    if (need_tokens) {
      if (chunk.num_tokens == 0 || chunk.num_tokens > layout.chunk_tokens()) {
        return Status::InvalidArgument(where() + " has " + std::to_string(chunk.num_tokens) +
                                       " tokens; expected 1 to " +
                                       std::to_string(layout.chunk_tokens()));
      }
      const uint32_t needed = CeilDiv(chunk.num_tokens, layout.block_tokens());
      if (num_blocks < needed) {
        return Status::InvalidArgument(where() + " holds " + std::to_string(chunk.num_tokens) +
                                       " tokens in " + std::to_string(num_blocks) +
                                       " blocks; it needs " + std::to_string(needed) + " of " +
                                       std::to_string(layout.block_tokens()) + " tokens");
      }
    }
    for (size_t g = 0; g < layout.groups().size(); ++g) {
      const ChunkGroup& group = layout.groups()[g];
      for (uint32_t block : chunk.block_ids) {
        if (block >= group.geometry.num_blocks) {
          return Status::OutOfRange(
              "block id " + std::to_string(block) + " out of range [0, " +
              std::to_string(group.geometry.num_blocks) + ") for group " + std::to_string(g) +
              " (layer " + std::to_string(group.layers.front()) + " and " +
              std::to_string(group.layers.size() - 1) + " more) in " + where());
        }
      }
    }
  }
  return Status::Ok();
}

uint64_t Transfers::gates_waiting() const {
  uint64_t waiting = 0;
  for (const auto& worker : workers_) waiting += worker->gates_waiting();
  return waiting;
}

void Transfers::StopCopies() {
  stopping_copies_.store(true);
  for (const auto& worker : workers_) worker->Wake();
}

Transfers::Reply Transfers::SubmitTransfer(Direction direction, TransferJob job, bool begun) {
  job.Seal();  // block_ids is complete: point the copies at it
  copies_in_flight_.fetch_add(1);
  job.complete = [this, complete = std::move(job.complete)](
                     const Status& copied, const std::vector<uint8_t>& cut, const Status& cut_why) {
    complete(copied, cut, cut_why);
    copies_in_flight_.fetch_sub(1);
  };
  if (!begun) deferred_.Begin(job.owner);
  MarkStage(deferred_.trace(), job.request_id, TraceStage::kDaemonHandled);
  const size_t device = size_t(job.registration->device);
  workers_[device]->Submit(direction, std::move(job));
  return std::optional<ReplyBody>();  // the reply comes when the copy completes
}

Result<Transfers::Admitted> Transfers::Admit(const Request& r, const CopyRequest& m,
                                             bool store) const {
  Result<std::shared_ptr<Registration>> found =
      registrations_.FindRegistration(m.registration_id, r.peer);
  if (!found.ok()) return found.status();
  Admitted admitted{std::move(*found), std::nullopt};
  const Registration& reg = *admitted.registration;
  if (m.signal) {
    Result<CopySignal> made = MakeSignal(reg, *m.signal, store, r.deadline);
    if (!made.ok()) return made.status();
    admitted.signal = std::move(*made);
  }
  Status ok = CheckChunks(reg, m.chunks, /*need_tokens=*/store);
  if (ok.ok()) ok = deferred_.CheckInFlight(r.peer.id);
  if (!ok.ok()) {
    if (admitted.signal) admitted.signal->ReleaseAll(ok);
    return ok;
  }
  return admitted;
}

TransferJob Transfers::NewJob(const Request& r, std::shared_ptr<Registration> reg,
                              const std::vector<ChunkRequest>& chunks) {
  TransferJob job;
  size_t ids = 0;
  for (const ChunkRequest& chunk : chunks) ids += chunk.block_ids.size();
  job.chunks.reserve(chunks.size());
  job.slabs.reserve(chunks.size());
  job.block_ids.reserve(ids);
  job.registration = std::move(reg);
  job.owner = r.peer.id;
  job.request_id = r.id;
  job.deadline = r.deadline;
  return job;
}

void Transfers::FailChunk(ChunkOutcome& outcome, const Status& why,
                          std::atomic<uint64_t>& failed) const {
  outcome = ChunkOutcome{ChunkResult::kFailed, 0, why};
  Stats::Add(why.code() == StatusCode::kTimedOut ? stats_.chunks_timed_out : failed);
}

Transfers::Reply Transfers::Store(const Request& r, StoreRequest& m) {
  Result<Admitted> admitted = Admit(r, m, /*store=*/true);
  if (!admitted.ok()) return admitted.status();
  std::shared_ptr<Registration> reg = std::move(admitted->registration);
  std::optional<CopySignal> signal = std::move(admitted->signal);

  const uint64_t chunk_bytes = reg->layout.chunk_bytes();
  auto reply = std::make_shared<StoreReply>();
  reply->chunks.resize(m.chunks.size());
  auto reserved = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job = NewJob(r, reg, m.chunks);
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    const ChunkRequest& chunk = m.chunks[i];
    ChunkStore::StoreTicket ticket = store_->BeginStore(reg->scope, chunk.key, chunk_bytes);
    ChunkOutcome& outcome = reply->chunks[i];
    switch (ticket.result) {
      case ChunkStore::Reservation::kAlreadyPresent:
        outcome.result = ChunkResult::kAlreadyPresent;
        Stats::Add(stats_.store_chunks_already_present);
        continue;
      case ChunkStore::Reservation::kNoRoom:
        outcome.result = ChunkResult::kSkippedNoRoom;
        Stats::Add(stats_.store_chunks_no_room);
        continue;
      case ChunkStore::Reservation::kReserved: break;
    }
    job.Add(kernels::ChunkCopy{ticket.slot, nullptr, 0, chunk.num_tokens, 0}, ticket.slab,
            chunk.block_ids.data(), chunk.block_ids.size());
    outcome.num_tokens = chunk.num_tokens;
    reserved->emplace_back(i, ticket.entry);
  }
  if (reserved->empty()) {  // nothing to read: the blocks may be reused now
    if (signal) signal->ReleaseAll(Status::Ok());
    return std::optional<ReplyBody>(std::move(*reply));
  }
  if (signal) signal->PresetStatus(0);
  job.signal = std::move(signal);
  job.complete = [this, r, reg, reply, reserved, chunk_bytes](
                     const Status& copied, const std::vector<uint8_t>& cut, const Status& cut_why) {
    for (size_t k = 0; k < reserved->size(); ++k) {
      auto [index, entry] = (*reserved)[k];
      ChunkOutcome& outcome = reply->chunks[index];
      if (copied.ok() && !cut[k]) {
        store_->CommitStore(entry, outcome.num_tokens);
        outcome.result = ChunkResult::kStored;
        stats_.ChunkStored(reg->stats, outcome.num_tokens, chunk_bytes);
      } else {
        store_->AbortStore(entry);  // a partly written slot is never published
        FailChunk(outcome, copied.ok() ? cut_why : copied, stats_.store_chunks_failed);
      }
    }
    deferred_.Finish(r, std::move(*reply));
  };
  return SubmitTransfer(Direction::kStore, std::move(job));
}

Transfers::Reply Transfers::Retrieve(const Request& r, RetrieveRequest& m) {
  Result<Admitted> admitted = Admit(r, m, /*store=*/false);
  if (!admitted.ok()) return admitted.status();
  std::shared_ptr<Registration> reg = std::move(admitted->registration);
  std::optional<CopySignal> signal = std::move(admitted->signal);
  std::vector<std::optional<ChunkStore::ReadTicket>> tickets(m.chunks.size());
  if (tiers_.enabled()) {
    // The request's chunks already in L1 are pinned now, and stay pinned
    // until their copy ends: promoting the others must not evict them.
    std::vector<ChunkKey> below;
    for (size_t i = 0; i < m.chunks.size(); ++i) {
      tickets[i] = store_->BeginRead(reg->scope, m.chunks[i].key);
      if (!tickets[i]) below.push_back(m.chunks[i].key);
    }
    if (!below.empty()) {
      // Promoted first (off the frontend), then copied like any L1 chunk.
      deferred_.Begin(r.peer.id);
      auto request = std::make_shared<RetrieveRequest>(std::move(m));
      request->OwnBlockIds();  // its message is gone by then
      auto pinned = std::make_shared<decltype(tickets)>(std::move(tickets));
      TierChain::Scope scope{reg->scope, reg->namespace_id, reg->layout.fingerprint(),
                             reg->layout.chunk_bytes(), reg->layout.chunk_tokens()};
      tiers_.Promote(scope, std::move(below), [this, r, request, reg, pinned, signal] {
        Reply now = RetrieveFromL1(r, *request, reg, signal, std::move(*pinned), /*begun=*/true);
        if (now.ok() && now->has_value()) deferred_.Finish(r, **now);
      });
      return std::optional<ReplyBody>();
    }
  }
  return RetrieveFromL1(r, m, reg, std::move(signal), std::move(tickets), /*begun=*/false);
}

Transfers::Reply Transfers::RetrieveFromL1(
    const Request& r, const RetrieveRequest& m, std::shared_ptr<Registration> reg,
    std::optional<CopySignal> signal, std::vector<std::optional<ChunkStore::ReadTicket>> tickets,
    bool begun) {
  // The status the slots carry when the copy succeeds: NotFound when a
  // chunk is missing, the first chunk's error when one failed here.
  uint32_t preset = 0;
  const ChunkLayout& layout = reg->layout;
  const uint64_t chunk_tokens = layout.chunk_tokens();
  auto reply = std::make_shared<RetrieveReply>();
  reply->chunks.resize(m.chunks.size());
  auto reading = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job = NewJob(r, reg, m.chunks);
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    const ChunkRequest& chunk = m.chunks[i];
    ChunkOutcome& outcome = reply->chunks[i];
    // A chunk not pinned before was promoted meanwhile, or is missing.
    if (!tickets[i]) tickets[i] = store_->BeginRead(reg->scope, chunk.key);
    const std::optional<ChunkStore::ReadTicket>& ticket = tickets[i];
    if (!ticket) {
      outcome.result = ChunkResult::kMissing;
      if (preset == 0) preset = uint32_t(StatusCode::kNotFound);
      Stats::Add(stats_.retrieve_chunks_missing);
      continue;
    }
    const uint32_t stored = ticket->num_tokens;
    const uint32_t needed = CeilDiv(stored, layout.block_tokens());
    const uint32_t given = uint32_t(chunk.block_ids.size());
    const uint64_t first_token = i * chunk_tokens;
    const uint32_t skip = uint32_t(
        std::min<uint64_t>(stored, m.skip_tokens > first_token ? m.skip_tokens - first_token : 0));
    if (given < needed) {
      store_->EndRead(ticket->entry);
      FailChunk(outcome,
                Status::InvalidArgument("chunk " + std::to_string(i) + " stores " +
                                        std::to_string(stored) + " tokens, which need " +
                                        std::to_string(needed) + " blocks; the request names " +
                                        std::to_string(given)),
                stats_.retrieve_chunks_failed);
      if (preset == 0) preset = uint32_t(StatusCode::kInvalidArgument);
      continue;
    }
    outcome.num_tokens = stored - skip;
    if (skip == stored) {  // already on the GPU: nothing to write
      store_->EndRead(ticket->entry);
      outcome.result = ChunkResult::kRetrieved;
      continue;
    }
    job.Add(kernels::ChunkCopy{const_cast<uint8_t*>(ticket->slot), nullptr, 0, stored, skip},
            ticket->slab, chunk.block_ids.data(), chunk.block_ids.size());
    reading->emplace_back(i, ticket->entry);
  }
  const uint64_t lease_id = m.lease_id;
  if (reading->empty()) {
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    if (signal) signal->ReleaseAll(Status(StatusCode(preset), ""));
    return std::optional<ReplyBody>(std::move(*reply));
  }
  if (signal) signal->PresetStatus(preset);
  job.signal = std::move(signal);
  const uint64_t chunk_bytes = layout.chunk_bytes();
  job.complete = [this, r, reg, reply, reading, lease_id, chunk_bytes](
                     const Status& copied, const std::vector<uint8_t>& cut, const Status& cut_why) {
    for (size_t k = 0; k < reading->size(); ++k) {
      auto [index, entry] = (*reading)[k];
      store_->EndRead(entry);
      ChunkOutcome& outcome = reply->chunks[index];
      if (copied.ok() && !cut[k]) {
        outcome.result = ChunkResult::kRetrieved;
        stats_.ChunkRetrieved(reg->stats, outcome.num_tokens, chunk_bytes);
      } else {
        FailChunk(outcome, copied.ok() ? cut_why : copied, stats_.retrieve_chunks_failed);
      }
    }
    // An expired or unknown lease is no error here: the retrieve is done.
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    deferred_.Finish(r, std::move(*reply));
  };
  return SubmitTransfer(Direction::kRetrieve, std::move(job), begun);
}

}  // namespace kvstash::server
