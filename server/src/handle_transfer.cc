// Store and Retrieve: validate everything, reserve or pin slots in the chunk
// store, hand the copies to the device's transfer worker, answer per chunk.
#include <string>

#include "service.h"

namespace kvstash::server {

namespace {

using ChunkList = flatbuffers::Vector<flatbuffers::Offset<wire::ChunkBlocks>>;

uint32_t CeilDiv(uint32_t a, uint32_t b) { return (a + b - 1) / b; }

struct Outcome {
  wire::ChunkResult result = wire::ChunkResult::Failed;
  uint32_t num_tokens = 0;
  Status error;
};

proto::Bytes OutcomeReply(uint64_t request_id, wire::Body type, const std::vector<Outcome>& outcomes) {
  flatbuffers::FlatBufferBuilder fbb(64 + 32 * outcomes.size());
  std::vector<flatbuffers::Offset<wire::ChunkOutcome>> offsets;
  offsets.reserve(outcomes.size());
  for (const Outcome& o : outcomes) {
    auto message = o.error.ok() ? 0 : fbb.CreateString(o.error.message()).o;
    offsets.push_back(wire::CreateChunkOutcome(fbb, o.result, o.num_tokens,
                                               proto::ToWire(o.error.code()),
                                               flatbuffers::Offset<flatbuffers::String>(message)));
  }
  auto chunks = fbb.CreateVector(offsets);
  flatbuffers::Offset<void> body = type == wire::Body::StoreReply
                                       ? wire::CreateStoreReply(fbb, chunks).Union()
                                       : wire::CreateRetrieveReply(fbb, chunks).Union();
  return proto::Finish(fbb, request_id, type, body);
}

}  // namespace

Status Service::CheckChunkCount(const ChunkList* chunks) const {
  if (chunks == nullptr || chunks->size() == 0) {
    return Status::InvalidArgument("the request names no chunks");
  }
  if (chunks->size() > config_.max_chunks_per_request) {
    return Status::TooLarge("the request names " + std::to_string(chunks->size()) +
                            " chunks; the limit is " +
                            std::to_string(config_.max_chunks_per_request));
  }
  return Status::Ok();
}

Status Service::CheckChunks(const Registration& reg, const ChunkList* chunks,
                            bool need_tokens) const {
  const ChunkLayout& layout = reg.layout;
  for (size_t i = 0; i < chunks->size(); ++i) {
    const wire::ChunkBlocks* chunk = chunks->Get(i);
    // Built only for an error message: this loop runs for every chunk.
    auto where = [&] { return "chunk " + std::to_string(i) + " of registration " + std::to_string(reg.id); };
    if (chunk == nullptr || chunk->key() == nullptr) return Status::InvalidArgument(where() + " has no key");
    if (chunk->block_ids() == nullptr) return Status::InvalidArgument(where() + " names no blocks");
    const uint32_t num_blocks = chunk->block_ids()->size();
    if (num_blocks > layout.blocks_per_chunk()) {
      return Status::InvalidArgument(where() + " names " + std::to_string(num_blocks) +
                                     " blocks; a chunk spans " +
                                     std::to_string(layout.blocks_per_chunk()));
    }
    if (need_tokens) {
      if (chunk->num_tokens() == 0 || chunk->num_tokens() > layout.chunk_tokens()) {
        return Status::InvalidArgument(where() + " has " + std::to_string(chunk->num_tokens()) +
                                       " tokens; expected 1 to " +
                                       std::to_string(layout.chunk_tokens()));
      }
      const uint32_t needed = CeilDiv(chunk->num_tokens(), layout.block_tokens());
      if (num_blocks < needed) {
        return Status::InvalidArgument(where() + " holds " + std::to_string(chunk->num_tokens()) +
                                       " tokens in " + std::to_string(num_blocks) +
                                       " blocks; it needs " + std::to_string(needed) + " of " +
                                       std::to_string(layout.block_tokens()) + " tokens");
      }
    }
    for (size_t g = 0; g < layout.groups().size(); ++g) {
      const ChunkGroup& group = layout.groups()[g];
      for (uint32_t block : *chunk->block_ids()) {
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
  return std::optional<proto::Bytes>();  // the reply comes when the copy completes
}

Service::Reply Service::Store(const Request& r, const wire::StoreRequest& m) {
  // Limits that depend on no registration first.
  KVSTASH_RETURN_IF_ERROR(CheckChunkCount(m.chunks()));
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id(), r.peer);
  if (!found.ok()) return found.status();
  std::shared_ptr<Registration> reg = *found;
  KVSTASH_RETURN_IF_ERROR(CheckChunks(*reg, m.chunks(), /*need_tokens=*/true));
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));

  const uint64_t chunk_bytes = reg->layout.chunk_bytes();
  auto outcomes = std::make_shared<std::vector<Outcome>>(m.chunks()->size());
  auto reserved = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job;
  job.registration = reg;
  job.owner = r.peer.id;
  job.deadline = r.deadline;
  for (size_t i = 0; i < m.chunks()->size(); ++i) {
    const wire::ChunkBlocks* chunk = m.chunks()->Get(i);
    ChunkStore::StoreTicket ticket = store_->BeginStore(reg->scope, proto::FromWire(*chunk->key()), chunk_bytes);
    Outcome& outcome = (*outcomes)[i];
    switch (ticket.result) {
      case ChunkStore::Reservation::kAlreadyPresent:
        outcome.result = wire::ChunkResult::AlreadyPresent;
        Stats::Add(stats_.store_chunks_already_present);
        continue;
      case ChunkStore::Reservation::kNoRoom:
        outcome.result = wire::ChunkResult::SkippedNoRoom;
        Stats::Add(stats_.store_chunks_no_room);
        continue;
      case ChunkStore::Reservation::kReserved:
        break;
    }
    job.block_ids.emplace_back(chunk->block_ids()->begin(), chunk->block_ids()->end());
    job.chunks.push_back(kernels::ChunkCopy{ticket.slot, nullptr, uint32_t(job.block_ids.back().size()),
                                            chunk->num_tokens(), 0});
    outcome.num_tokens = chunk->num_tokens();
    reserved->emplace_back(i, ticket.entry);
  }
  if (reserved->empty()) {
    return std::optional<proto::Bytes>(OutcomeReply(r.id, wire::Body::StoreReply, *outcomes));
  }
  for (size_t c = 0; c < job.chunks.size(); ++c) job.chunks[c].block_ids = job.block_ids[c].data();
  job.complete = [this, r, reg, outcomes, reserved, chunk_bytes](const Status& copied) {
    for (auto [index, entry] : *reserved) {
      Outcome& outcome = (*outcomes)[index];
      if (copied.ok()) {
        store_->CommitStore(entry, outcome.num_tokens);
        outcome.result = wire::ChunkResult::Stored;
        Stats::Add(stats_.store_chunks_stored);
        Stats::Add(stats_.store_tokens, outcome.num_tokens);
        Stats::Add(stats_.store_bytes, chunk_bytes);
        Stats::Add(reg->stats.store_chunks);
        Stats::Add(reg->stats.store_tokens, outcome.num_tokens);
        Stats::Add(reg->stats.store_bytes, chunk_bytes);
      } else {
        store_->AbortStore(entry);
        outcome = Outcome{wire::ChunkResult::Failed, 0, copied};
        Stats::Add(stats_.store_chunks_failed);
      }
    }
    Finish(r, OutcomeReply(r.id, wire::Body::StoreReply, *outcomes));
  };
  return SubmitTransfer(Direction::kStore, std::move(job));
}

Service::Reply Service::Retrieve(const Request& r, const wire::RetrieveRequest& m) {
  // Limits that depend on no registration first.
  KVSTASH_RETURN_IF_ERROR(CheckChunkCount(m.chunks()));
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id(), r.peer);
  if (!found.ok()) return found.status();
  std::shared_ptr<Registration> reg = *found;
  KVSTASH_RETURN_IF_ERROR(CheckChunks(*reg, m.chunks(), /*need_tokens=*/false));
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));

  const ChunkLayout& layout = reg->layout;
  const uint64_t chunk_tokens = layout.chunk_tokens();
  auto outcomes = std::make_shared<std::vector<Outcome>>(m.chunks()->size());
  auto reading = std::make_shared<std::vector<std::pair<size_t, ChunkStore::Entry*>>>();
  TransferJob job;
  job.registration = reg;
  job.owner = r.peer.id;
  job.deadline = r.deadline;
  for (size_t i = 0; i < m.chunks()->size(); ++i) {
    const wire::ChunkBlocks* chunk = m.chunks()->Get(i);
    Outcome& outcome = (*outcomes)[i];
    std::optional<ChunkStore::ReadTicket> ticket =
        store_->BeginRead(reg->scope, proto::FromWire(*chunk->key()));
    if (!ticket) {
      outcome.result = wire::ChunkResult::Missing;
      Stats::Add(stats_.retrieve_chunks_missing);
      continue;
    }
    const uint32_t stored = ticket->num_tokens;
    const uint32_t needed = CeilDiv(stored, layout.block_tokens());
    const uint32_t given = chunk->block_ids()->size();
    const uint64_t first_token = i * chunk_tokens;
    const uint32_t skip = uint32_t(std::min<uint64_t>(
        stored, m.skip_tokens() > first_token ? m.skip_tokens() - first_token : 0));
    if (given < needed) {
      store_->EndRead(ticket->entry);
      outcome = Outcome{wire::ChunkResult::Failed, 0,
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
      outcome.result = wire::ChunkResult::Retrieved;
      continue;
    }
    job.block_ids.emplace_back(chunk->block_ids()->begin(), chunk->block_ids()->end());
    job.chunks.push_back(kernels::ChunkCopy{const_cast<uint8_t*>(ticket->slot), nullptr, given, stored, skip});
    reading->emplace_back(i, ticket->entry);
  }
  const uint64_t lease_id = m.lease_id();
  if (reading->empty()) {
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    return std::optional<proto::Bytes>(OutcomeReply(r.id, wire::Body::RetrieveReply, *outcomes));
  }
  const uint64_t chunk_bytes = layout.chunk_bytes();
  job.complete = [this, r, reg, outcomes, reading, lease_id, chunk_bytes](const Status& copied) {
    for (auto [index, entry] : *reading) {
      store_->EndRead(entry);
      Outcome& outcome = (*outcomes)[index];
      if (copied.ok()) {
        outcome.result = wire::ChunkResult::Retrieved;
        Stats::Add(stats_.retrieve_chunks);
        Stats::Add(stats_.retrieve_tokens, outcome.num_tokens);
        Stats::Add(stats_.retrieve_bytes, chunk_bytes);
        Stats::Add(reg->stats.retrieve_chunks);
        Stats::Add(reg->stats.retrieve_tokens, outcome.num_tokens);
        Stats::Add(reg->stats.retrieve_bytes, chunk_bytes);
      } else {
        outcome = Outcome{wire::ChunkResult::Failed, 0, copied};
        Stats::Add(stats_.retrieve_chunks_failed);
      }
    }
    // An expired or unknown lease is no error here: the retrieve is done.
    if (lease_id != 0) store_->Release(lease_id, r.peer.id);
    Finish(r, OutcomeReply(r.id, wire::Body::RetrieveReply, *outcomes));
  };
  return SubmitTransfer(Direction::kRetrieve, std::move(job));
}

Service::Reply Service::Lookup(const Request& r, const wire::LookupRequest& m) {
  Result<std::shared_ptr<Registration>> found = FindRegistration(m.registration_id(), r.peer);
  if (!found.ok()) return found.status();
  Registration& reg = **found;
  if (m.keys() == nullptr) return Status::InvalidArgument("Lookup names no keys");
  if (m.keys()->size() > config_.max_chunks_per_request) {
    return Status::TooLarge("Lookup names " + std::to_string(m.keys()->size()) +
                            " keys; the limit is " + std::to_string(config_.max_chunks_per_request));
  }
  // Clamped: a lease never outlives --max-lease-ms.
  const uint32_t lease_ms =
      std::min(m.lease_ms() ? m.lease_ms() : config_.lease_ms, config_.max_lease_ms);
  std::vector<ChunkKey> keys;
  keys.reserve(m.keys()->size());
  for (const wire::Key* key : *m.keys()) keys.push_back(proto::FromWire(*key));
  ChunkStore::LookupResult hit = store_->Lookup(reg.scope, keys, reg.layout.chunk_tokens(),
                                                std::chrono::milliseconds(lease_ms), r.peer.id);
  if (!hit.refused.ok()) return hit.refused;
  Stats::Add(stats_.lookup_requests);
  Stats::Add(stats_.lookup_keys, keys.size());
  Stats::Add(stats_.lookup_hit_chunks, hit.hit_chunks);
  Stats::Add(stats_.lookup_miss_chunks, keys.size() - hit.hit_chunks);
  Stats::Add(stats_.lookup_hit_tokens, hit.hit_tokens);
  Stats::Add(reg.stats.lookup_hit_chunks, hit.hit_chunks);
  Stats::Add(reg.stats.lookup_miss_chunks, keys.size() - hit.hit_chunks);
  Stats::Add(reg.stats.lookup_hit_tokens, hit.hit_tokens);
  flatbuffers::FlatBufferBuilder fbb(64);
  auto body = wire::CreateLookupReply(fbb, hit.hit_chunks, hit.hit_tokens, hit.lease_id,
                                      hit.lease_id ? lease_ms : 0);
  return std::optional<proto::Bytes>(proto::Finish(fbb, r.id, wire::Body::LookupReply, body.Union()));
}

}  // namespace kvstash::server
