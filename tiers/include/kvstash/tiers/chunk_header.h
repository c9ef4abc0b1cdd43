// The header every chunk carries once it leaves L1 (docs/protocol.md, tiers): the
// chunk's identity (key, scope, layout fingerprint, token count, payload
// size) and checksums over the payload and over the header itself. The
// payload that follows is exactly the flat chunk, unchanged on every tier.
//
// A chunk whose header fails to decode, names another chunk, says more
// tokens than a chunk of its registration holds, or whose payload does not
// match its checksum is dropped and reported missing: a lower tier never
// serves a byte it cannot vouch for. Every field a reader acts on before
// the payload checksum is verified (token count, payload size, part size)
// is inside the header checksum and bounded by what the reader expects.
//
// Encoded form, little-endian, kChunkHeaderBytes long:
//   offset size field
//        0    4 magic "KVSC"
//        4    2 version (1)
//        6    2 encoded header size (136)
//        8   32 chunk key
//       40   32 scope: the namespace id (never the tenant salt)
//       72   32 layout fingerprint
//      104    4 token count
//      108    4 part bytes: the size of the pieces an L3 value is split
//               into (0 where the payload is one piece, as on L2)
//      112    8 payload bytes
//      120    8 payload checksum, XXH3-64
//      128    8 header checksum, XXH3-64 over bytes [0, 128)
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

#include "kvstash/chunk_layout.h"
#include "kvstash/keys.h"
#include "kvstash/status.h"

namespace kvstash::tiers {

// A namespace id (kvstash::NamespaceId()): model, tenant salt, layout and
// rank hashed together, so it names a scope without revealing the salt.
using ScopeId = std::array<uint8_t, 32>;

inline constexpr uint32_t kChunkHeaderMagic = 0x4353564b;  // "KVSC" little-endian
inline constexpr uint16_t kChunkHeaderVersion = 1;
inline constexpr size_t kChunkHeaderBytes = 136;

// Which chunk: the scope it lives in and its key. Tiers key everything by it.
struct ChunkId {
  ScopeId scope{};
  ChunkKey key{};
  bool operator==(const ChunkId& o) const { return scope == o.scope && key == o.key; }
  bool operator!=(const ChunkId& o) const { return !(*this == o); }
};

struct ChunkIdHash {
  size_t operator()(const ChunkId& id) const;
};

struct ChunkHeader {
  ChunkId id;
  Fingerprint layout_fingerprint{};
  uint32_t num_tokens = 0;
  uint32_t part_bytes = 0;  // L3: the writer's part size; 0: one piece
  uint64_t payload_bytes = 0;
  uint64_t payload_checksum = 0;
};

// XXH3-64 of the payload, as the header stores it.
uint64_t PayloadChecksum(const uint8_t* payload, size_t size);

// Writes the header, with its header checksum, into out[0, kChunkHeaderBytes).
void EncodeChunkHeader(const ChunkHeader& header, uint8_t* out);

// Reads a header; errors (kMalformedMessage) name the field that failed:
// size, magic, version, header size or header checksum.
Result<ChunkHeader> DecodeChunkHeader(const uint8_t* bytes, size_t size);

// What the reader expects of a chunk it asked for.
struct ChunkExpectation {
  ChunkId id;
  Fingerprint layout_fingerprint{};
  uint64_t payload_bytes = 0;
  // The registration's chunk_tokens: a header saying more (or none) is
  // not a chunk of this registration.
  uint32_t max_tokens = UINT32_MAX;
};

// Whether a header's token count fits a chunk of `max_tokens` tokens: at
// least one, at most `max_tokens`. What Lookup may count from a header it
// has not read the payload of.
bool TokensFit(const ChunkHeader& header, uint32_t max_tokens);

// Checks a decoded header against what was asked for (id, fingerprint,
// payload size, token count). NotFound naming the mismatching field when
// it differs.
Status CheckChunkHeader(const ChunkHeader& header, const ChunkExpectation& expected);

// CheckChunkHeader, then the payload's checksum. NotFound when anything
// differs: the caller drops the chunk and reports it missing.
Status VerifyChunk(const ChunkHeader& header, const ChunkExpectation& expected,
                   const uint8_t* payload, size_t payload_size);

}  // namespace kvstash::tiers
