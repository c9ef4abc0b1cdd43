// Request encoding: client values to FlatBuffers envelopes.
#include "encode.h"

#include <variant>

namespace kvstash::client {

namespace {

using flatbuffers::FlatBufferBuilder;
using flatbuffers::Offset;

template <typename T>
Bytes Envelope(FlatBufferBuilder& fbb, uint64_t request_id, Offset<T> body) {
  return proto::Finish(fbb, request_id, wire::BodyTraits<T>::enum_value, body.Union());
}

Offset<wire::Allocation> EncodeAllocation(FlatBufferBuilder& fbb, const Allocation& allocation) {
  if (const auto* shm = std::get_if<HostShm>(&allocation)) {
    auto handle = wire::CreateHostShmHandleDirect(fbb, shm->name.c_str(), shm->size_bytes);
    return wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, handle.Union());
  }
  const auto& cuda = std::get<CudaIpc>(allocation);
  auto ipc = fbb.CreateVector(cuda.ipc_handle.data(), cuda.ipc_handle.size());
  auto uuid = fbb.CreateVector(cuda.gpu_uuid.data(), cuda.gpu_uuid.size());
  auto handle = wire::CreateCudaIpcHandle(fbb, ipc, cuda.size_bytes, uuid);
  return wire::CreateAllocation(fbb, wire::MemoryHandle::CudaIpcHandle, handle.Union());
}

Offset<flatbuffers::Vector<Offset<wire::ChunkBlocks>>> EncodeChunks(
    FlatBufferBuilder& fbb, const std::vector<ChunkBlocks>& chunks) {
  std::vector<Offset<wire::ChunkBlocks>> offsets;
  offsets.reserve(chunks.size());
  for (const ChunkBlocks& chunk : chunks) {
    const wire::Key key = proto::ToWire(chunk.key);
    auto block_ids = fbb.CreateVector(chunk.block_ids);
    offsets.push_back(wire::CreateChunkBlocks(fbb, &key, chunk.num_tokens, block_ids));
  }
  return fbb.CreateVector(offsets);
}

size_t ChunksBytesHint(const std::vector<ChunkBlocks>& chunks) {
  size_t bytes = 256;
  for (const ChunkBlocks& chunk : chunks) bytes += 64 + 4 * chunk.block_ids.size();
  return bytes;
}

}  // namespace

Bytes EncodeHello(uint64_t request_id, const std::string& client_name) {
  FlatBufferBuilder fbb(256);
  auto body = wire::CreateHelloRequestDirect(fbb, proto::kProtocolVersion, client_name.c_str());
  return Envelope(fbb, request_id, body);
}

Bytes EncodeRegisterKV(uint64_t request_id, const RegisterOptions& options) {
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
  auto body = wire::CreateRegisterKVRequestDirect(fbb, options.model.c_str(),
                                                  options.tenant_salt.c_str(), options.tp_rank,
                                                  options.tp_size, &allocations, &layers);
  return Envelope(fbb, request_id, body);
}

Bytes EncodeUnregisterKV(uint64_t request_id, uint64_t registration_id) {
  FlatBufferBuilder fbb(128);
  return Envelope(fbb, request_id, wire::CreateUnregisterKVRequest(fbb, registration_id));
}

Bytes EncodeStore(uint64_t request_id, uint64_t registration_id,
                  const std::vector<ChunkBlocks>& chunks) {
  FlatBufferBuilder fbb(ChunksBytesHint(chunks));
  auto encoded = EncodeChunks(fbb, chunks);
  return Envelope(fbb, request_id, wire::CreateStoreRequest(fbb, registration_id, encoded));
}

Bytes EncodeRetrieve(uint64_t request_id, uint64_t registration_id,
                     const std::vector<ChunkBlocks>& chunks, uint32_t skip_tokens,
                     uint64_t lease_id) {
  FlatBufferBuilder fbb(ChunksBytesHint(chunks));
  auto encoded = EncodeChunks(fbb, chunks);
  auto body = wire::CreateRetrieveRequest(fbb, registration_id, encoded, skip_tokens, lease_id);
  return Envelope(fbb, request_id, body);
}

Bytes EncodeLookup(uint64_t request_id, uint64_t registration_id,
                   const std::vector<ChunkKey>& keys, uint32_t lease_ms) {
  FlatBufferBuilder fbb(256 + 32 * keys.size());
  std::vector<wire::Key> wire_keys;
  wire_keys.reserve(keys.size());
  for (const ChunkKey& key : keys) wire_keys.push_back(proto::ToWire(key));
  auto body = wire::CreateLookupRequestDirect(fbb, registration_id, &wire_keys, lease_ms);
  return Envelope(fbb, request_id, body);
}

Bytes EncodeRelease(uint64_t request_id, uint64_t lease_id) {
  FlatBufferBuilder fbb(128);
  return Envelope(fbb, request_id, wire::CreateReleaseRequest(fbb, lease_id));
}

Bytes EncodeClear(uint64_t request_id, const std::string& model, const std::string& tenant_salt) {
  FlatBufferBuilder fbb(256);
  auto body = wire::CreateClearRequestDirect(fbb, model.c_str(), tenant_salt.c_str());
  return Envelope(fbb, request_id, body);
}

Bytes EncodeDescribe(uint64_t request_id) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, request_id, wire::CreateDescribeRequest(fbb));
}

Bytes EncodeStats(uint64_t request_id) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, request_id, wire::CreateStatsRequest(fbb));
}

Bytes EncodePing(uint64_t request_id) {
  FlatBufferBuilder fbb(64);
  return Envelope(fbb, request_id, wire::CreatePingRequest(fbb));
}

}  // namespace kvstash::client
