// The tier interface (docs/protocol.md, tiers): a store below L1 that holds chunks
// by (scope, key) in the flat chunk format behind a ChunkHeader. L2 (local
// disk, DiskTier) and L3 (Redis / Valkey, RedisTier) implement it; Mooncake
// Store or an S3-compatible store would be a third implementation beside
// them, with no change to the callers.
//
// Every call is asynchronous and batched: it queues the work and returns;
// `done` runs exactly once per call with one result per item, in the
// order of the request, on a thread of the tier (or on the caller's thread
// before the call returns when the answer needs no I/O, e.g. a miss in the
// L2 index or an open circuit breaker). `done` must not block for long.
// Buffers named in requests must stay valid until `done` runs.
//
// Nothing a tier returns is trusted blindly by it: every read checks the
// header and the payload checksum, and a chunk that fails is dropped and
// reported as a miss (NotFound), never served.
#pragma once

#include <cstdint>
#include <functional>
#include <future>
#include <string>
#include <vector>

#include "kvstash/status.h"
#include "kvstash/tiers/chunk_header.h"
#include "kvstash/tiers/tier_stats.h"

namespace kvstash::tiers {

struct PutRequest {
  ChunkId id;
  Fingerprint layout_fingerprint{};
  uint32_t num_tokens = 0;
  const uint8_t* payload = nullptr;  // the flat chunk; valid until done runs
  uint64_t payload_bytes = 0;
};

enum class PutOutcome : uint8_t { kStored, kAlreadyPresent, kFailed };

struct PutResult {
  PutOutcome outcome = PutOutcome::kFailed;
  Status status;  // why, with kFailed
};

struct GetRequest {
  ChunkExpectation expect;     // id, layout fingerprint, payload bytes
  uint8_t* payload = nullptr;  // expect.payload_bytes to fill; valid until done runs
};

struct GetResult {
  // Ok: payload filled and verified. NotFound: absent, or dropped for
  // failing a check (the message says which). Other codes: the tier failed
  // (Unavailable, TimedOut, Internal); the payload buffer holds no promise.
  Status status;
  uint32_t num_tokens = 0;  // with Ok
};

struct Presence {
  Status status;         // Ok when the tier could answer
  bool present = false;  // with Ok
  ChunkHeader header;    // with present: its decoded, checked header
};

struct TierUsage {
  uint64_t capacity_bytes = 0;  // 0: the tier does not know (a shared store)
  uint64_t used_bytes = 0;
  uint64_t chunks = 0;
};

class Tier {
 public:
  using PutDone = std::function<void(std::vector<PutResult>)>;
  using GetDone = std::function<void(std::vector<GetResult>)>;
  using ContainsDone = std::function<void(std::vector<Presence>)>;
  using RemoveDone = std::function<void(std::vector<Status>)>;

  virtual ~Tier() = default;

  // "l2-disk", "l3-redis": the tier's name in logs, stats and metrics.
  virtual const std::string& name() const = 0;

  // Writes chunks that are not there yet. A failed put leaves nothing that
  // reads as valid.
  virtual void Put(std::vector<PutRequest> batch, PutDone done) = 0;
  // Reads and verifies chunks into the callers' buffers.
  virtual void Get(std::vector<GetRequest> batch, GetDone done) = 0;
  // Which chunks the tier holds, with their headers (token counts).
  virtual void Contains(std::vector<ChunkId> ids, ContainsDone done) = 0;
  // Drops chunks; removing an absent chunk is not an error.
  virtual void Remove(std::vector<ChunkId> ids, RemoveDone done) = 0;

  virtual TierUsage Usage() const = 0;
  virtual const TierStats& stats() const = 0;
};

// Blocking and future-returning forms of the calls, for callers and tests
// that would rather wait.
std::future<std::vector<PutResult>> PutAsync(Tier& tier, std::vector<PutRequest> batch);
std::future<std::vector<GetResult>> GetAsync(Tier& tier, std::vector<GetRequest> batch);
std::future<std::vector<Presence>> ContainsAsync(Tier& tier, std::vector<ChunkId> ids);
std::future<std::vector<Status>> RemoveAsync(Tier& tier, std::vector<ChunkId> ids);

}  // namespace kvstash::tiers
