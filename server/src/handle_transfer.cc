// Store and Retrieve: validate everything, reserve or pin slots in the chunk
// store, hand the copies to the device's transfer worker, answer per chunk.
// A chunk whose copy the request's deadline cut off comes back Failed with
// TimedOut; a stored one is not published.
#include <string>

#include "service.h"

namespace kvstash::server {

namespace {

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

Status TimedOutChunk() {
  return Status::TimedOut("the request's deadline passed before this chunk was copied; "
                          "none of its blocks was written after it");
}

}  // namespace

Status Service::CheckChunks(const Registration& reg, const std::vector<ChunkRequest>& chunks,
                            bool need_tokens) const {
  const ChunkLayout& layout = reg.layout;
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRequest& chunk = chunks[i];
    // Built only for an error message: this loop runs for every chunk.
    auto where = [&] { return "chunk " + std::to_string(i) + " of registration " + std::to_string(reg.id); };
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
          return Status::OutOfRange("block id " + std::to_string(block) + " out of range [0, " +
                                    std::to_string(group.geometry.num_blocks) + ") for group " +
                                    std::to_string(g) + " (layer " +
                                    std::to_string(group.layers.front()) + " and " +
                                    std::to_string(group.layers.size() - 1) + " more) in " + where());
        }
      }
    }
  }
  return Status::Ok();
}

Service::Reply Service::SubmitTransfer(Direction direction, TransferJob job) {
  // block_ids grew while the job was built: point the copies at it only now.
  for (size_t c = 0; c < job.chunks.size(); ++c) job.chunks[c].block_ids = job.block_ids[c].data();
  BeginDeferred(job.owner);
  const size_t device = size_t(job.registration->device);
  workers_[device]->Submit(direction, std::move(job));
  return std::optional<ReplyBody>();  // the reply comes when the copy completes
}

Service::Reply Service::Store(const Request& r, StoreRequest& m) {
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id, r.peer);
  if (!found.ok()) return found.status();
  std::shared_ptr<Registration> reg = *found;
  KVSTASH_RETURN_IF_ERROR(CheckChunks(*reg, m.chunks, /*need_tokens=*/true));
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));

  const uint64_t chunk_bytes = reg->layout.chunk_bytes();
  auto reply = std::make_shared<StoreReply>();
  reply->chunks.resize(m.chunks.size());
  auto reserved = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job;
  job.registration = reg;
  job.owner = r.peer.id;
  job.deadline = r.deadline;
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    ChunkRequest& chunk = m.chunks[i];
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
      case ChunkStore::Reservation::kReserved:
        break;
    }
    const uint32_t blocks = uint32_t(chunk.block_ids.size());
    job.block_ids.push_back(std::move(chunk.block_ids));
    job.chunks.push_back(kernels::ChunkCopy{ticket.slot, nullptr, blocks, chunk.num_tokens, 0});
    outcome.num_tokens = chunk.num_tokens;
    reserved->emplace_back(i, ticket.entry);
  }
  if (reserved->empty()) return std::optional<ReplyBody>(std::move(*reply));
  job.complete = [this, r, reg, reply, reserved, chunk_bytes](const Status& copied,
                                                              const std::vector<uint8_t>& missed) {
    for (size_t k = 0; k < reserved->size(); ++k) {
      auto [index, entry] = (*reserved)[k];
      ChunkOutcome& outcome = reply->chunks[index];
      if (copied.ok() && !missed[k]) {
        store_->CommitStore(entry, outcome.num_tokens);
        outcome.result = ChunkResult::kStored;
        stats_.ChunkStored(reg->stats, outcome.num_tokens, chunk_bytes);
      } else {
        store_->AbortStore(entry);  // a partly written slot is never published
        outcome = ChunkOutcome{ChunkResult::kFailed, 0, missed[k] ? TimedOutChunk() : copied};
        Stats::Add(missed[k] ? stats_.chunks_timed_out : stats_.store_chunks_failed);
      }
    }
    Finish(r, std::move(*reply));
  };
  return SubmitTransfer(Direction::kStore, std::move(job));
}

Service::Reply Service::Retrieve(const Request& r, RetrieveRequest& m) {
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id, r.peer);
  if (!found.ok()) return found.status();
  std::shared_ptr<Registration> reg = *found;
  KVSTASH_RETURN_IF_ERROR(CheckChunks(*reg, m.chunks, /*need_tokens=*/false));
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));

  const ChunkLayout& layout = reg->layout;
  const uint64_t chunk_tokens = layout.chunk_tokens();
  auto reply = std::make_shared<RetrieveReply>();
  reply->chunks.resize(m.chunks.size());
  auto reading = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job;
  job.registration = reg;
  job.owner = r.peer.id;
  job.deadline = r.deadline;
  for (size_t i = 0; i < m.chunks.size(); ++i) {
    ChunkRequest& chunk = m.chunks[i];
    ChunkOutcome& outcome = reply->chunks[i];
    std::optional<ChunkStore::ReadTicket> ticket = store_->BeginRead(reg->scope, chunk.key);
    if (!ticket) {
      outcome.result = ChunkResult::kMissing;
      Stats::Add(stats_.retrieve_chunks_missing);
      continue;
    }
    const uint32_t stored = ticket->num_tokens;
    const uint32_t needed = CeilDiv(stored, layout.block_tokens());
    const uint32_t given = uint32_t(chunk.block_ids.size());
    const uint64_t first_token = i * chunk_tokens;
    const uint32_t skip = uint32_t(std::min<uint64_t>(
        stored, m.skip_tokens > first_token ? m.skip_tokens - first_token : 0));
    if (given < needed) {
      store_->EndRead(ticket->entry);
      outcome = ChunkOutcome{ChunkResult::kFailed, 0,
                             Status::InvalidArgument("chunk " + std::to_string(i) + " stores " +
                                                     std::to_string(stored) + " tokens, which need " +
                                                     std::to_string(needed) + " blocks; the request names " +
                                                     std::to_string(given))};
      Stats::Add(stats_.retrieve_chunks_failed);
      continue;
    }
    outcome.num_tokens = stored - skip;
    if (skip == stored) {  // already on the GPU: nothing to write
      store_->EndRead(ticket->entry);
      outcome.result = ChunkResult::kRetrieved;
      continue;
    }
    job.block_ids.push_back(std::move(chunk.block_ids));
    job.chunks.push_back(kernels::ChunkCopy{const_cast<uint8_t*>(ticket->slot), nullptr, given, stored, skip});
    reading->emplace_back(i, ticket->entry);
  }
  const uint64_t lease_id = m.lease_id;
  if (reading->empty()) {
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    return std::optional<ReplyBody>(std::move(*reply));
  }
  const uint64_t chunk_bytes = layout.chunk_bytes();
  job.complete = [this, r, reg, reply, reading, lease_id, chunk_bytes](
                     const Status& copied, const std::vector<uint8_t>& missed) {
    for (size_t k = 0; k < reading->size(); ++k) {
      auto [index, entry] = (*reading)[k];
      store_->EndRead(entry);
      ChunkOutcome& outcome = reply->chunks[index];
      if (copied.ok() && !missed[k]) {
        outcome.result = ChunkResult::kRetrieved;
        stats_.ChunkRetrieved(reg->stats, outcome.num_tokens, chunk_bytes);
      } else {
        outcome = ChunkOutcome{ChunkResult::kFailed, 0, missed[k] ? TimedOutChunk() : copied};
        Stats::Add(missed[k] ? stats_.chunks_timed_out : stats_.retrieve_chunks_failed);
      }
    }
    // An expired or unknown lease is no error here: the retrieve is done.
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    Finish(r, std::move(*reply));
  };
  return SubmitTransfer(Direction::kRetrieve, std::move(job));
}

}  // namespace kvstash::server
