// The chunk header: round trip, and every way a stored chunk can be wrong
// (any corrupted byte of any field, a header naming another chunk, a
// payload that does not match its checksum) is caught.
#include "kvstash/tiers/chunk_header.h"

#include <gtest/gtest.h>
#include <xxhash.h>

#include <cstring>

#include <vector>

#include "tier_test_data.h"

namespace kvstash::tiers {
namespace {

using testing::MakeFingerprint;
using testing::MakeId;

struct Chunk {
  ChunkHeader header;
  std::vector<uint8_t> payload;
  std::vector<uint8_t> encoded = std::vector<uint8_t>(kChunkHeaderBytes);
  ChunkExpectation expect() const {
    return {header.id, header.layout_fingerprint, header.payload_bytes};
  }
};

Chunk MakeChunk(size_t payload_bytes = 10000) {
  Chunk c;
  c.header.id = MakeId(3, 7);
  c.header.layout_fingerprint = MakeFingerprint(9);
  c.header.num_tokens = 200;
  c.payload.resize(payload_bytes);
  testing::FillPayload(c.header.id, c.payload.data(), c.payload.size());
  c.header.payload_bytes = payload_bytes;
  c.header.payload_checksum = PayloadChecksum(c.payload.data(), c.payload.size());
  EncodeChunkHeader(c.header, c.encoded.data());
  return c;
}

TEST(ChunkHeader, RoundTripsEveryField) {
  const Chunk c = MakeChunk();
  Result<ChunkHeader> decoded = DecodeChunkHeader(c.encoded.data(), c.encoded.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->id, c.header.id);
  EXPECT_EQ(decoded->layout_fingerprint, c.header.layout_fingerprint);
  EXPECT_EQ(decoded->num_tokens, 200u);
  EXPECT_EQ(decoded->part_bytes, 0u);
  EXPECT_EQ(decoded->payload_bytes, 10000u);
  EXPECT_EQ(decoded->payload_checksum, c.header.payload_checksum);
  EXPECT_TRUE(VerifyChunk(*decoded, c.expect(), c.payload.data(), c.payload.size()).ok());
}

// Every bit of every field (magic, version, size, key, scope, fingerprint,
// tokens, part size, payload size, payload checksum, header checksum).
TEST(ChunkHeader, RejectsAnyFlippedBitOfTheHeader) {
  const Chunk c = MakeChunk();
  for (size_t byte = 0; byte < kChunkHeaderBytes; ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      std::vector<uint8_t> bad = c.encoded;
      bad[byte] ^= static_cast<uint8_t>(1u << bit);
      EXPECT_FALSE(DecodeChunkHeader(bad.data(), bad.size()).ok())
          << "byte " << byte << " bit " << bit;
    }
  }
}

TEST(ChunkHeader, NamesTheFieldThatIsWrongEvenWithAValidChecksum) {
  // A writer of another version or a bug, not random corruption: the header
  // checksum is right, the field still is not.
  struct Case {
    size_t offset;
    uint8_t value;
    const char* says;
  };
  for (const Case& k : {Case{0, 'X', "magic"}, Case{4, 2, "version"}, Case{6, 64, "size field"}}) {
    std::vector<uint8_t> bytes = MakeChunk().encoded;
    bytes[k.offset] = k.value;
    const uint64_t resigned = XXH3_64bits(bytes.data(), 128);
    std::memcpy(bytes.data() + 128, &resigned, 8);  // little-endian host
    Result<ChunkHeader> decoded = DecodeChunkHeader(bytes.data(), bytes.size());
    ASSERT_FALSE(decoded.ok()) << k.says;
    EXPECT_NE(decoded.status().message().find(k.says), std::string::npos)
        << decoded.status().message();
  }
}

TEST(ChunkHeader, RejectsShortInput) {
  const Chunk c = MakeChunk();
  Result<ChunkHeader> decoded = DecodeChunkHeader(c.encoded.data(), kChunkHeaderBytes - 1);
  ASSERT_FALSE(decoded.ok());
  EXPECT_NE(decoded.status().message().find("135 bytes"), std::string::npos);
}

TEST(ChunkHeader, AHeaderOfAnotherChunkIsMissing) {
  const Chunk c = MakeChunk();
  ChunkExpectation other_key = c.expect();
  other_key.id.key[31] ^= 1;
  ChunkExpectation other_scope = c.expect();
  other_scope.id.scope[0] ^= 1;
  ChunkExpectation other_layout = c.expect();
  other_layout.layout_fingerprint[5] ^= 1;
  ChunkExpectation other_size = c.expect();
  other_size.payload_bytes += 256;
  struct Case {
    ChunkExpectation expect;
    const char* says;
  };
  for (const Case& k :
       {Case{other_key, "key"}, Case{other_scope, "scope"},
        Case{other_layout, "layout fingerprint"}, Case{other_size, "payload bytes"}}) {
    Status s = VerifyChunk(c.header, k.expect, c.payload.data(), c.payload.size());
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << k.says;
    EXPECT_NE(s.message().find(k.says), std::string::npos) << s.message();
  }
}

TEST(ChunkHeader, ATokenCountPastTheRegistrationsChunkIsMissing) {
  // A header with a valid checksum that says more tokens than a chunk of
  // the reader's registration holds (or none) names no chunk of it.
  for (uint32_t tokens : {201u, 0u, 80000u}) {
    Chunk c = MakeChunk();
    c.header.num_tokens = tokens;
    ChunkExpectation expect = c.expect();
    expect.max_tokens = 200;
    Status s = VerifyChunk(c.header, expect, c.payload.data(), c.payload.size());
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << tokens;
    EXPECT_NE(s.message().find("tokens"), std::string::npos) << s.message();
    EXPECT_FALSE(TokensFit(c.header, 200)) << tokens;
  }
  Chunk c = MakeChunk();
  ChunkExpectation expect = c.expect();
  expect.max_tokens = 200;
  EXPECT_TRUE(VerifyChunk(c.header, expect, c.payload.data(), c.payload.size()).ok());
}

TEST(ChunkHeader, ThePartSizeIsInsideTheHeaderChecksum) {
  Chunk c = MakeChunk();
  c.header.part_bytes = 1u << 20;
  EncodeChunkHeader(c.header, c.encoded.data());
  Result<ChunkHeader> decoded = DecodeChunkHeader(c.encoded.data(), c.encoded.size());
  ASSERT_TRUE(decoded.ok()) << decoded.status().ToString();
  EXPECT_EQ(decoded->part_bytes, 1u << 20);
  std::vector<uint8_t> bad = c.encoded;
  bad[108] = 1;  // part size 1, checksum not redone
  EXPECT_FALSE(DecodeChunkHeader(bad.data(), bad.size()).ok());
}

TEST(ChunkHeader, AnyCorruptedPayloadByteIsMissing) {
  Chunk c = MakeChunk(4096 + 13);
  for (size_t i = 0; i < c.payload.size(); i += 97) {
    std::vector<uint8_t> bad = c.payload;
    bad[i] ^= 0x40;
    Status s = VerifyChunk(c.header, c.expect(), bad.data(), bad.size());
    EXPECT_EQ(s.code(), StatusCode::kNotFound) << "byte " << i;
  }
  // A payload cut short is caught before its checksum is computed.
  Status s = VerifyChunk(c.header, c.expect(), c.payload.data(), c.payload.size() - 1);
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
}

}  // namespace
}  // namespace kvstash::tiers
