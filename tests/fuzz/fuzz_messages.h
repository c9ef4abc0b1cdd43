// The messages the request fuzzer starts from, built with the proto
// builders: a valid message of every request type, sequences that reach the
// copy path (RegisterKV of the harness's real shared memory, Store, Lookup,
// Retrieve, Release, UnregisterKV), and the crashes the fuzzer found.
//
// A fuzz input is a sequence of messages, each framed as a little-endian
// uint32 length and that many bytes; what cannot be framed is one message.
// Inside one input, registration ids 1..8 name the registrations made
// earlier in the same input and lease ids 1..8 the leases granted in it (the
// harness rewrites them), so that sequences stay meaningful whatever ids the
// daemon hands out.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace kvstash::fuzz {

// The engine memory the harness creates: a POSIX shm object holding
// kLayers layers of the geometry below (vLLM NHD, 16-token blocks).
inline constexpr char kShmName[] = "/kvstash-fuzz-engine";
inline constexpr uint32_t kLayers = 2;
inline constexpr uint32_t kBlocks = 32;
inline constexpr uint32_t kBlockTokens = 16;
inline constexpr uint32_t kHeads = 2;
inline constexpr uint32_t kHeadBytes = 64;
inline constexpr uint32_t kChunkTokens = 16;  // the harness's daemon config
uint64_t LayerBytes();
uint64_t ShmBytes();

using Message = std::vector<uint8_t>;
// A named fuzz input: framed messages.
struct Input {
  std::string name;
  std::vector<uint8_t> bytes;
};

// Frames messages into one fuzz input.
std::vector<uint8_t> Frame(const std::vector<Message>& messages);
// Splits a fuzz input back into messages.
std::vector<std::pair<const uint8_t*, size_t>> Unframe(const uint8_t* data, size_t size);

// Valid inputs of every request type and the copy-path sequences.
std::vector<Input> Seeds();
// The crashes the fuzzer found (hollow unions, text that is not UTF-8 or too
// long, a geometry span past 2^64 bytes, a NUL in a shared-memory name), as
// inputs (the checked-in regression corpus is these bytes).
std::vector<Input> Regressions();

}  // namespace kvstash::fuzz
