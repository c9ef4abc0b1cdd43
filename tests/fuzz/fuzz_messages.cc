// Seed and regression inputs built with the generated FlatBuffers builders.
#include "fuzz_messages.h"

#include <cstring>

#include "kvstash/proto/codec.h"

namespace kvstash::fuzz {
namespace {

using flatbuffers::FlatBufferBuilder;

LayerGeometry EngineGeometry() {
  const uint64_t head = kHeadBytes, token = head * kHeads, block = token * kBlockTokens;
  return LayerGeometry{kBlocks,         2,     kBlockTokens, kHeads,      kHeadBytes, block,
                       block * kBlocks, token, head,         DType::kBF16};
}

struct RegisterParams {
  std::string model = "fuzz-model";
  std::string salt;
  std::string shm = kShmName;
  bool hollow_shm = false;   // HostShmHandle type, no table
  bool hollow_cuda = false;  // CudaIpcHandle type, no table
  LayerGeometry geometry = EngineGeometry();
};

Message Register(uint64_t request_id, const RegisterParams& p) {
  FlatBufferBuilder fbb;
  flatbuffers::Offset<wire::Allocation> allocation;
  if (p.hollow_shm || p.hollow_cuda) {
    wire::AllocationBuilder builder(fbb);
    builder.add_handle_type(p.hollow_shm ? wire::MemoryHandle::HostShmHandle
                                         : wire::MemoryHandle::CudaIpcHandle);
    allocation = builder.Finish();
  } else {
    auto shm = wire::CreateHostShmHandle(fbb, fbb.CreateString(p.shm), ShmBytes());
    allocation = wire::CreateAllocation(fbb, wire::MemoryHandle::HostShmHandle, shm.Union());
  }
  std::vector<flatbuffers::Offset<wire::LayerDesc>> layers;
  for (uint32_t l = 0; l < kLayers; ++l) {
    layers.push_back(
        wire::CreateLayerDesc(fbb, 0, l * LayerBytes(), proto::ToWire(fbb, p.geometry)));
  }
  std::vector<flatbuffers::Offset<wire::Allocation>> allocations{allocation};
  auto body =
      wire::CreateRegisterKVRequest(fbb, fbb.CreateString(p.model), fbb.CreateString(p.salt), 0, 1,
                                    fbb.CreateVector(allocations), fbb.CreateVector(layers));
  return proto::Finish(fbb, request_id, wire::Body::RegisterKVRequest, body.Union());
}

wire::Key KeyOf(uint8_t n) {
  std::array<uint8_t, 32> bytes{};
  bytes[0] = n;
  bytes[31] = 0x5a;
  return wire::Key(flatbuffers::span<const uint8_t, 32>(bytes.data(), 32));
}

// Chunks `first`.. of one block each (kChunkTokens == kBlockTokens).
std::vector<flatbuffers::Offset<wire::ChunkBlocks>> ChunkList(FlatBufferBuilder& fbb, uint8_t first,
                                                              uint8_t count, uint32_t first_block,
                                                              uint32_t last_tokens = kChunkTokens) {
  std::vector<flatbuffers::Offset<wire::ChunkBlocks>> chunks;
  for (uint8_t i = 0; i < count; ++i) {
    const wire::Key key = KeyOf(uint8_t(first + i));
    std::vector<uint32_t> blocks{first_block + i};
    chunks.push_back(wire::CreateChunkBlocksDirect(
        fbb, &key, i + 1 == count ? last_tokens : kChunkTokens, &blocks));
  }
  return chunks;
}

Message Store(uint64_t id, uint64_t registration, uint8_t first, uint8_t count, uint32_t block,
              uint32_t last_tokens = kChunkTokens) {
  FlatBufferBuilder fbb;
  auto chunks = ChunkList(fbb, first, count, block, last_tokens);
  auto body = wire::CreateStoreRequestDirect(fbb, registration, &chunks);
  return proto::Finish(fbb, id, wire::Body::StoreRequest, body.Union());
}

Message Retrieve(uint64_t id, uint64_t registration, uint8_t first, uint8_t count, uint32_t block,
                 uint32_t skip, uint64_t lease) {
  FlatBufferBuilder fbb;
  auto chunks = ChunkList(fbb, first, count, block);
  auto body = wire::CreateRetrieveRequestDirect(fbb, registration, &chunks, skip, lease);
  return proto::Finish(fbb, id, wire::Body::RetrieveRequest, body.Union());
}

Message Lookup(uint64_t id, uint64_t registration, uint8_t first, uint8_t count,
               uint32_t lease_ms) {
  FlatBufferBuilder fbb;
  std::vector<wire::Key> keys;
  for (uint8_t i = 0; i < count; ++i) keys.push_back(KeyOf(uint8_t(first + i)));
  auto body =
      wire::CreateLookupRequest(fbb, registration, fbb.CreateVectorOfStructs(keys), lease_ms);
  return proto::Finish(fbb, id, wire::Body::LookupRequest, body.Union());
}

Message Release(uint64_t id, uint64_t lease) {
  FlatBufferBuilder fbb;
  return proto::Finish(fbb, id, wire::Body::ReleaseRequest,
                       wire::CreateReleaseRequest(fbb, lease).Union());
}

Message Unregister(uint64_t id, uint64_t registration) {
  FlatBufferBuilder fbb;
  return proto::Finish(fbb, id, wire::Body::UnregisterKVRequest,
                       wire::CreateUnregisterKVRequest(fbb, registration).Union());
}

Message Hello(uint64_t id, uint32_t version) {
  FlatBufferBuilder fbb;
  auto body = wire::CreateHelloRequestDirect(fbb, version, "kvstash-fuzz");
  return proto::Finish(fbb, id, wire::Body::HelloRequest, body.Union());
}

Message Clear(uint64_t id, const char* model, const char* salt) {
  FlatBufferBuilder fbb;
  auto body = wire::CreateClearRequestDirect(fbb, model, salt);
  return proto::Finish(fbb, id, wire::Body::ClearRequest, body.Union());
}

template <typename Builder>
Message Empty(uint64_t id, wire::Body type, Builder build) {
  FlatBufferBuilder fbb;
  return proto::Finish(fbb, id, type, build(fbb).Union());
}

Message Describe(uint64_t id) {
  return Empty(id, wire::Body::DescribeRequest,
               [](FlatBufferBuilder& f) { return wire::CreateDescribeRequest(f); });
}
Message Stats(uint64_t id) {
  return Empty(id, wire::Body::StatsRequest,
               [](FlatBufferBuilder& f) { return wire::CreateStatsRequest(f); });
}
Message Ping(uint64_t id) {
  return Empty(id, wire::Body::PingRequest,
               [](FlatBufferBuilder& f) { return wire::CreatePingRequest(f); });
}

}  // namespace

uint64_t LayerBytes() { return LayerExtentBytes(EngineGeometry()); }
uint64_t ShmBytes() { return kLayers * LayerBytes(); }

std::vector<uint8_t> Frame(const std::vector<Message>& messages) {
  std::vector<uint8_t> out;
  for (const Message& m : messages) {
    const uint32_t size = uint32_t(m.size());
    for (int b = 0; b < 4; ++b) out.push_back(uint8_t(size >> (8 * b)));
    out.insert(out.end(), m.begin(), m.end());
  }
  return out;
}

std::vector<std::pair<const uint8_t*, size_t>> Unframe(const uint8_t* data, size_t size) {
  std::vector<std::pair<const uint8_t*, size_t>> out;
  while (size > 0) {
    if (size < 4) {
      out.emplace_back(data, size);
      break;
    }
    const uint32_t length = uint32_t(data[0]) | uint32_t(data[1]) << 8 | uint32_t(data[2]) << 16 |
                            uint32_t(data[3]) << 24;
    if (length > size - 4) {  // not a frame: the rest is one message
      out.emplace_back(data, size);
      break;
    }
    out.emplace_back(data + 4, length);
    data += 4 + length;
    size -= 4 + length;
  }
  return out;
}

std::vector<Input> Seeds() {
  RegisterParams plain;
  RegisterParams tenant;
  tenant.model = "fuzz-model-\xc3\xa4";
  tenant.salt = "tenant-1";
  RegisterParams missing_shm;
  missing_shm.shm = "/kvstash-fuzz-missing";
  return {
      {"hello", Frame({Hello(1, proto::kProtocolVersion)})},
      {"hello_old_version", Frame({Hello(1, 1)})},
      {"ping", Frame({Ping(1)})},
      {"describe", Frame({Describe(1)})},
      {"stats", Frame({Stats(1)})},
      {"clear_all", Frame({Clear(1, "", "")})},
      {"clear_model", Frame({Clear(1, "fuzz-model", "")})},
      {"register", Frame({Register(1, plain)})},
      {"register_missing_shm", Frame({Register(1, missing_shm)})},
      {"register_then_describe",
       Frame({Register(1, tenant), Describe(2), Stats(3), Unregister(4, 1)})},
      {"store", Frame({Register(1, plain), Store(2, 1, 0, 2, 0)})},
      {"store_partial_chunk", Frame({Register(1, plain), Store(2, 1, 0, 3, 4, 5)})},
      {"lookup", Frame({Register(1, plain), Lookup(2, 1, 0, 4, 0)})},
      {"lookup_no_keys", Frame({Register(1, plain), Lookup(2, 1, 0, 0, 0)})},
      {"retrieve_missing", Frame({Register(1, plain), Retrieve(2, 1, 9, 2, 8, 0, 0)})},
      {"release_unknown", Frame({Release(1, 77)})},
      {"unregister_unknown", Frame({Unregister(1, 1)})},
      {"round_trip", Frame({Register(1, plain), Store(2, 1, 0, 4, 0), Lookup(3, 1, 0, 4, 500),
                            Retrieve(4, 1, 0, 4, 16, 0, 1), Release(5, 1), Unregister(6, 1)})},
      {"round_trip_skip", Frame({Register(1, tenant), Store(2, 1, 0, 3, 0, 7),
                                 Lookup(3, 1, 0, 3, 0), Retrieve(4, 1, 0, 3, 20, 20, 1)})},
      {"two_registrations",
       Frame({Register(1, plain), Register(2, tenant), Store(3, 1, 0, 2, 0), Store(4, 2, 0, 2, 2),
              Retrieve(5, 2, 0, 2, 10, 0, 0), Unregister(6, 1), Retrieve(7, 1, 0, 2, 12, 0, 0)})},
  };
}

std::vector<Input> Regressions() {
  RegisterParams hollow_shm;
  hollow_shm.hollow_shm = true;
  RegisterParams hollow_cuda;
  hollow_cuda.hollow_cuda = true;
  RegisterParams bad_model;
  bad_model.model = "llama\xff\xfe";
  RegisterParams bad_salt;
  bad_salt.salt = "salt\xc0\x80";
  RegisterParams long_model;
  long_model.model = std::string(4000, 'm');
  // A span beyond 2^64 bytes compared against a smaller stride: UBSan's
  // float-cast-overflow, and "must be at least 0 bytes".
  RegisterParams huge_span;
  huge_span.geometry = LayerGeometry{
      1,  2,         0xffffffffu, 0xffffffffu, 64, 0, (uint64_t{1} << 38) + 1, uint64_t{1} << 38,
      64, DType::kU8};
  RegisterParams nul_shm;
  nul_shm.shm = std::string(kShmName) + std::string("\0tail", 5);
  return {
      {"crash_register_hollow_shm_union", Frame({Register(1, hollow_shm)})},
      {"crash_register_hollow_cuda_union", Frame({Register(1, hollow_cuda)})},
      {"crash_non_utf8_model_then_describe",
       Frame({Register(1, bad_model), Describe(2), Stats(3)})},
      {"crash_non_utf8_salt_then_describe", Frame({Register(1, bad_salt), Describe(2)})},
      {"overlong_model_then_describe", Frame({Register(1, long_model), Describe(2)})},
      {"ubsan_geometry_span_overflow", Frame({Register(1, huge_span)})},
      {"nul_in_shm_name", Frame({Register(1, nul_shm), Store(2, 1, 0, 1, 0)})},
  };
}

}  // namespace kvstash::fuzz
