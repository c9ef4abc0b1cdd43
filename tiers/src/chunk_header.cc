// Encoding and checks of the chunk header (see chunk_header.h for the format).
#include "kvstash/tiers/chunk_header.h"

#include <xxhash.h>

#include <cstring>
#include <string>

namespace kvstash::tiers {
namespace {

constexpr size_t kChecksummedBytes = 128;  // everything before the header checksum

void PutLe(uint8_t* out, uint64_t value, size_t size) {
  for (size_t i = 0; i < size; ++i) out[i] = static_cast<uint8_t>(value >> (8 * i));
}

uint64_t GetLe(const uint8_t* in, size_t size) {
  uint64_t value = 0;
  for (size_t i = 0; i < size; ++i) value |= uint64_t{in[i]} << (8 * i);
  return value;
}

std::string Hex64(uint64_t v) {
  char text[24];
  std::snprintf(text, sizeof(text), "%016llx", static_cast<unsigned long long>(v));
  return text;
}

}  // namespace

size_t ChunkIdHash::operator()(const ChunkId& id) const {
  // Keys and namespace ids are SHA-256 outputs: any 8 bytes of each are
  // uniform, but mix both so that one key in two scopes lands apart.
  uint64_t a = 0;
  uint64_t b = 0;
  std::memcpy(&a, id.key.data(), sizeof(a));
  std::memcpy(&b, id.scope.data(), sizeof(b));
  return static_cast<size_t>(a ^ (b * 0x9e3779b97f4a7c15ULL));
}

uint64_t PayloadChecksum(const uint8_t* payload, size_t size) { return XXH3_64bits(payload, size); }

void EncodeChunkHeader(const ChunkHeader& h, uint8_t* out) {
  std::memset(out, 0, kChunkHeaderBytes);
  PutLe(out + 0, kChunkHeaderMagic, 4);
  PutLe(out + 4, kChunkHeaderVersion, 2);
  PutLe(out + 6, kChunkHeaderBytes, 2);
  std::memcpy(out + 8, h.id.key.data(), 32);
  std::memcpy(out + 40, h.id.scope.data(), 32);
  std::memcpy(out + 72, h.layout_fingerprint.data(), 32);
  PutLe(out + 104, h.num_tokens, 4);
  PutLe(out + 108, h.part_bytes, 4);
  PutLe(out + 112, h.payload_bytes, 8);
  PutLe(out + 120, h.payload_checksum, 8);
  PutLe(out + 128, XXH3_64bits(out, kChecksummedBytes), 8);
}

Result<ChunkHeader> DecodeChunkHeader(const uint8_t* in, size_t size) {
  if (size < kChunkHeaderBytes) {
    return Status::Malformed("chunk header of " + std::to_string(size) + " bytes, expected " +
                             std::to_string(kChunkHeaderBytes));
  }
  const uint64_t magic = GetLe(in, 4);
  if (magic != kChunkHeaderMagic) {
    return Status::Malformed("chunk header magic 0x" + Hex64(magic) + ", expected 0x" +
                             Hex64(kChunkHeaderMagic));
  }
  const uint64_t version = GetLe(in + 4, 2);
  if (version != kChunkHeaderVersion) {
    return Status::Malformed("chunk header version " + std::to_string(version) +
                             ", this build reads version " + std::to_string(kChunkHeaderVersion));
  }
  const uint64_t header_size = GetLe(in + 6, 2);
  if (header_size != kChunkHeaderBytes) {
    return Status::Malformed("chunk header size field " + std::to_string(header_size) +
                             ", expected " + std::to_string(kChunkHeaderBytes));
  }
  const uint64_t stored = GetLe(in + 128, 8);
  const uint64_t computed = XXH3_64bits(in, kChecksummedBytes);
  if (stored != computed) {
    return Status::Malformed("chunk header checksum " + Hex64(stored) +
                             " does not match its bytes (" + Hex64(computed) + ")");
  }
  ChunkHeader h;
  std::memcpy(h.id.key.data(), in + 8, 32);
  std::memcpy(h.id.scope.data(), in + 40, 32);
  std::memcpy(h.layout_fingerprint.data(), in + 72, 32);
  h.num_tokens = static_cast<uint32_t>(GetLe(in + 104, 4));
  h.part_bytes = static_cast<uint32_t>(GetLe(in + 108, 4));
  h.payload_bytes = GetLe(in + 112, 8);
  h.payload_checksum = GetLe(in + 120, 8);
  return h;
}

bool TokensFit(const ChunkHeader& h, uint32_t max_tokens) {
  return h.num_tokens >= 1 && h.num_tokens <= max_tokens;
}

Status CheckChunkHeader(const ChunkHeader& h, const ChunkExpectation& expected) {
  if (h.id.key != expected.id.key) {
    return Status::NotFound("chunk header names key " + ToHex(h.id.key) + ", expected " +
                            ToHex(expected.id.key));
  }
  if (h.id.scope != expected.id.scope) {
    return Status::NotFound("chunk header names scope " + ToHex(h.id.scope.data(), 32) +
                            ", expected " + ToHex(expected.id.scope.data(), 32));
  }
  if (h.layout_fingerprint != expected.layout_fingerprint) {
    return Status::NotFound("chunk header names layout fingerprint " +
                            ToHex(h.layout_fingerprint.data(), 32) + ", expected " +
                            ToHex(expected.layout_fingerprint.data(), 32));
  }
  if (h.payload_bytes != expected.payload_bytes) {
    return Status::NotFound("chunk header says " + std::to_string(h.payload_bytes) +
                            " payload bytes, expected " + std::to_string(expected.payload_bytes));
  }
  if (!TokensFit(h, expected.max_tokens)) {
    return Status::NotFound("chunk header says " + std::to_string(h.num_tokens) +
                            " tokens, a chunk holds 1 to " + std::to_string(expected.max_tokens));
  }
  return Status::Ok();
}

Status VerifyChunk(const ChunkHeader& h, const ChunkExpectation& expected, const uint8_t* payload,
                   size_t payload_size) {
  KVSTASH_RETURN_IF_ERROR(CheckChunkHeader(h, expected));
  if (payload_size != h.payload_bytes) {
    return Status::NotFound("chunk payload of " + std::to_string(payload_size) +
                            " bytes, its header says " + std::to_string(h.payload_bytes));
  }
  const uint64_t computed = PayloadChecksum(payload, payload_size);
  if (computed != h.payload_checksum) {
    return Status::NotFound("chunk payload checksum " + Hex64(computed) +
                            " does not match its header's " + Hex64(h.payload_checksum));
  }
  return Status::Ok();
}

}  // namespace kvstash::tiers
