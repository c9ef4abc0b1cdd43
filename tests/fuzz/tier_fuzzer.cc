// libFuzzer over what L2 and L3 read before they trust it: the tier header
// decoder (a chunk file's or a Redis value's first bytes) with the checks
// that follow it, and the Redis reply reader with the parsers of the replies
// the router acts on (CLUSTER SLOTS, MOVED / ASK, error texts). The input
// is whatever a damaged disk or anyone answering on the Redis port can
// produce: it must be refused, never read or allocated past its bounds.
// Built with the other fuzzers (-DKVSTASH_BUILD_FUZZERS=ON); scripts/fuzz.sh
// runs it briefly.
#include <hiredis/hiredis.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "kvstash/tiers/chunk_header.h"
#include "redis_reply.h"

namespace {

using kvstash::tiers::ChunkExpectation;
using kvstash::tiers::ChunkHeader;

void FuzzHeader(const uint8_t* data, size_t size) {
  kvstash::Result<ChunkHeader> header = kvstash::tiers::DecodeChunkHeader(data, size);
  if (!header.ok()) return;
  // What a reader of a 64-token registration would do with it next.
  ChunkExpectation expect;
  expect.id = header->id;
  expect.layout_fingerprint = header->layout_fingerprint;
  expect.payload_bytes = size - kvstash::tiers::kChunkHeaderBytes;
  expect.max_tokens = 64;
  (void)kvstash::tiers::TokensFit(*header, expect.max_tokens);
  (void)kvstash::tiers::VerifyChunk(*header, expect, data + kvstash::tiers::kChunkHeaderBytes,
                                    size - kvstash::tiers::kChunkHeaderBytes);
}

void FuzzReplies(const uint8_t* data, size_t size) {
  struct ReaderFree {
    void operator()(redisReader* r) const { redisReaderFree(r); }
  };
  std::unique_ptr<redisReader, ReaderFree> reader(redisReaderCreate());
  kvstash::tiers::internal::ReplyBudget budget;
  budget.Install(reader.get());
  // Fed in pieces, as replies come off a socket.
  size_t fed = 0;
  budget.Reset(1u << 16, 1u << 20);  // per reply, as the router does
  for (int replies = 0; replies < 64;) {
    void* raw = nullptr;
    if (redisReaderGetReply(reader.get(), &raw) != REDIS_OK) return;
    if (raw == nullptr) {
      if (fed == size) return;
      const size_t piece = std::min<size_t>(size - fed, 1 + data[fed] % 64);
      if (redisReaderFeed(reader.get(), reinterpret_cast<const char*>(data + fed), piece) !=
          REDIS_OK) {
        return;
      }
      fed += piece;
      continue;
    }
    ++replies;
    budget.Reset(1u << 16, 1u << 20);
    const auto* reply = static_cast<const redisReply*>(raw);
    (void)kvstash::tiers::internal::ParseClusterSlots(reply);
    kvstash::tiers::internal::Redirect redirect;
    (void)kvstash::tiers::internal::ParseRedirect(reply, &redirect);
    (void)kvstash::tiers::internal::ReplyText(reply);
    if (reply->type == REDIS_REPLY_STRING) {
      FuzzHeader(reinterpret_cast<const uint8_t*>(reply->str), reply->len);
    }
    freeReplyObject(raw);
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  FuzzHeader(data, size);
  FuzzReplies(data, size);
  return 0;
}
