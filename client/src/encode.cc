// Request encoding: client values to FlatBuffers envelopes.
#include "encode.h"

#include <variant>

namespace kvstash::client {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

template <typename T>
Bytes Envelope(FlatBufferBuilder& fbb, const Header& header, Offset<T> body) {
  return proto::Finish(fbb, header.request_id, wire::BodyTraits<T>::enum_value, body.Union(),
                       header.deadline_ns);
}

Offset<wire::Allocation> EncodeAllocation(FlatBufferBuilder& fbb, const Allocation& allocation) {
  if (const auto* shm = std::get_if<HostShm>(&allocation)) {
    auto handle = wire::CreateHostShmHandleDirect(fbb, shm->name.c_str(), shm->size_bytes);
    return wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union());
  }
  if (const auto* peer_fd = std::get_if<PeerFd>(&allocation)) {
    auto handle = wire::CreatePeerFdHandle(fbb, peer_fd->fd, peer_fd->size_bytes);
    return wire::CreateAllocation(fbb, wire::MemoryHandle::PeerFdHandle, handle.Union());
  }
  const auto& cuda = std::get<CudaIpc>(allocation);
  auto ipc = fbb.CreateVector(cuda.ipc_handle.data(), cuda.ipc_handle.size());
  auto uuid = fbb.CreateVector(cuda.gpu_uuid.data(), cuda.gpu_uuid.size());
  auto handle = wire::CreateCudaIpcHandle(fbb, ipc, cuda.size_bytes, uuid);
  return wire::CreateAllocation(fbb, wire::MemoryHandle::CudaIpcHandle, handle.Union());
}

Offset<flatbuffers::Vector<Offset<wire::ChunkBlocks>>> EncodeChunks(FlatBufferBuilder& fbb,
                                                                    const ChunkList& chunks) {
  std::vector<Offset<wire::ChunkBlocks>> offsets;
  offsets.reserve(chunks.size());
  for (size_t i = 0; i < chunks.size(); ++i) {
    const ChunkRef chunk = chunks[i];
    const wire::Key key(flatbuffers::span<const uint8_t, 32>(chunk.key, 32));
    // The ids' one copy: from where the caller keeps them into the message.
    auto block_ids = fbb.CreateVector(chunk.block_ids, chunk.num_block_ids);
    offsets.push_back(wire::CreateChunkBlocks(fbb, &key, chunk.num_tokens, block_ids));
  }
  return fbb.CreateVector(offsets);
}

size_t ChunksBytesHint(const ChunkList& chunks) {
  size_t bytes = 256;
  for (size_t i = 0; i < chunks.size(); ++i) bytes += 64 + 4 * size_t(chunks[i].num_block_ids);
  return bytes;
}

}  // namespace

Bytes EncodeHello(const Header& header, const std::string& client_name) {
  FlatBufferBuilder fbb(256);
  auto body = wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, client_name.c_str());
  return Envelope(fbb, header, body);
}

Bytes EncodeRegisterKV(const Header& header, const RegisterOptions& options,
                       const std::string& fence_name) {
  FlatBufferBuilder fbb(1024 + 128 * options.layers.size());
  std::vector<Offset<wire::Allocation>> allocations;
  for (const Allocation& allocation : options.allocations) {
    allocations.push_back(EncodeAllocation(fbb, allocation));
  }
  std::vector<Offset<wire::LayerDesc>> layers;
  for (const LayerDesc& layer : options.layers) {
    auto geometry = proto::ToWire(fbb, layer.geometry);
    layers.push_back(wire::CreateLayerDesc(fbb, layer.allocation, layer.offset_bytes, geometry));
  }
  flatbuffers::Offset<wire::HostShmHandle> board;
  if (!options.board.name.empty()) {
    board =
        wire::CreateHostShmHandleDirect(fbb, options.board.name.c_str(), options.board.size_bytes);
  }
  auto body = wire::CreateRegisterKVRequestDirect(
      fbb, options.model.c_str(), options.tenant_salt.c_str(), options.tp_rank, options.tp_size,
      &allocations, &layers, board, fence_name.empty() ? nullptr : fence_name.c_str(),
      options.replicated_across_ranks);
  return Envelope(fbb, header, body);
}

Bytes EncodeUnregisterKV(const Header& header, uint64_t registration_id) {
  FlatBufferBuilder fbb(128);
  return Envelope(fbb, header, wire::CreateUnregisterKVRequest(fbb, registration_id));
}

Bytes EncodeStore(const Header& header, uint64_t registration_id, const ChunkList& chunks,
                  const BoardSignal* signal) {
  FlatBufferBuilder fbb(ChunksBytesHint(chunks));
  auto encoded = EncodeChunks(fbb, chunks);
  flatbuffers::Offset<wire::BoardSignal> board_signal;
  if (signal)
    board_signal = wire::CreateBoardSignal(fbb, signal->slot, signal->count, signal->sequence);
  return Envelope(fbb, header,
                  wire::CreateStoreRequest(fbb, registration_id, encoded, board_signal));
}

Bytes EncodeRetrieve(const Header& header, uint64_t registration_id, const ChunkList& chunks,
                     uint32_t skip_tokens, uint64_t lease_id, const BoardSignal* signal) {
  FlatBufferBuilder fbb(ChunksBytesHint(chunks));
  auto encoded = EncodeChunks(fbb, chunks);
  flatbuffers::Offset<wire::BoardSignal> board_signal;
  if (signal)
    board_signal = wire::CreateBoardSignal(fbb, signal->slot, signal->count, signal->sequence);
  auto body = wire::CreateRetrieveRequest(fbb, registration_id, encoded, skip_tokens, lease_id,
                                          board_signal);
  return Envelope(fbb, header, body);
}

Bytes EncodeLookup(const Header& header, uint64_t registration_id,
                   const std::vector<ChunkKey>& keys, uint32_t lease_ms, bool prefetch) {
  FlatBufferBuilder fbb(256 + 32 * keys.size());
  std::vector<wire::Key> wire_keys;
  wire_keys.reserve(keys.size());
  for (const ChunkKey& key : keys) wire_keys.push_back(proto::ToWire(key));
  auto body = wire::CreateLookupRequestDirect(fbb, registration_id, &wire_keys, lease_ms, prefetch);
  return Envelope(fbb, header, body);
}

Bytes EncodeRelease(const Header& header, uint64_t lease_id) {
  FlatBufferBuilder fbb(128);
  return Envelope(fbb, header, wire::CreateReleaseRequest(fbb, lease_id));
}

Bytes EncodeClear(const Header& header, const std::string& model, const std::string& tenant_salt) {
  FlatBufferBuilder fbb(256);
  auto body = wire::CreateClearRequestDirect(fbb, model.c_str(), tenant_salt.c_str());
  return Envelope(fbb, header, body);
}

Bytes EncodeDescribe(const Header& header) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, header, wire::CreateDescribeRequest(fbb));
}

Bytes EncodeStats(const Header& header) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, header, wire::CreateStatsRequest(fbb));
}

Bytes EncodePing(const Header& header) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, header, wire::CreatePingRequest(fbb));
}

Bytes EncodeAttachChannel(const Header& header, const std::string& shm_name,
                          uint64_t request_ring_bytes, uint64_t reply_ring_bytes) {
  FlatBufferBuilder fbb(128 + shm_name.size());
  return Envelope(fbb, header,
                  wire::CreateAttachChannelRequestDirect(fbb, shm_name.c_str(), request_ring_bytes,
                                                         reply_ring_bytes));
}

Bytes EncodeUnregisterKVReply(uint64_t request_id) {
  FlatBufferBuilder fbb(64);
  return proto::Finish(fbb, request_id, wire::Body::UnregisterKVReply,
                       wire::CreateUnregisterKVReply(fbb).Union());
}

bool RewriteRegistrationId(Bytes& bytes, uint64_t registration_id) {
  // Our own bytes, so no verification; the generated types hide their
  // Table base, so go through Table itself with their field offsets.
  auto* envelope = flatbuffers::GetMutableRoot<flatbuffers::Table>(bytes.data());
  const auto type = wire::Body(envelope->GetField<uint8_t>(wire::Envelope::VT_BODY_TYPE, 0));
  auto* body = envelope->GetPointer<flatbuffers::Table*>(wire::Envelope::VT_BODY);
  if (body == nullptr) return false;
  flatbuffers::voffset_t field = 0;
  switch (type) {
    case wire::Body::UnregisterKVRequest:
      field = wire::UnregisterKVRequest::VT_REGISTRATION_ID;
      break;
    case wire::Body::StoreRequest: field = wire::StoreRequest::VT_REGISTRATION_ID; break;
    case wire::Body::RetrieveRequest: field = wire::RetrieveRequest::VT_REGISTRATION_ID; break;
    case wire::Body::LookupRequest: field = wire::LookupRequest::VT_REGISTRATION_ID; break;
    default: return false;
  }
  // Present: registration ids are never 0, the default FlatBuffers omits.
  return body->SetField<uint64_t>(field, registration_id, 0);
}

}  // namespace kvstash::client
