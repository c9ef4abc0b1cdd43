// The values engines exchange with kvstashd through kvstash::Client: how KV
// memory is shared and laid out, what a registration returns, and per-chunk
// outcomes. Plain structs: no ZeroMQ, FlatBuffers or CUDA types.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include "kvstash/chunk_layout.h"
#include "kvstash/completion_board.h"  // BoardSignal
#include "kvstash/geometry.h"
#include "kvstash/keys.h"
#include "kvstash/status.h"

namespace kvstash {

// What the daemon said in its Hello reply.
struct ServerInfo {
  uint32_t protocol_version = 0;
  std::string server_version;
  std::array<uint8_t, 16> boot_id{};  // new on every daemon start
  uint32_t chunk_tokens = 0;
  uint32_t max_chunks_per_request = 0;
  uint64_t max_message_bytes = 0;
  std::string backend;  // "host" or "cuda"
  // kvstashd drops the registrations of a connection silent this long; the
  // client pings on its own well within it. 0: never.
  uint32_t peer_timeout_ms = 0;
  // kvstashd's process id in its own pid namespace (0: an older kvstashd).
  uint32_t pid = 0;
  // Daemon restarts this client has seen (boot id changes since Connect).
  // After each one the client registered every live registration again by
  // itself: registration ids stay valid; chunks stored before are gone.
  uint32_t restarts = 0;
  // Requests and replies travel through the shared-memory channel (same-host
  // clients on an ipc socket; docs/protocol.md "Shared-memory channel"), not
  // only over the socket.
  bool shm_channel = false;
};

// The daemon's L1 pool: it answers at once and pins its pool in the
// background; stores find room as ready_bytes grows to capacity_bytes.
struct PoolReadiness {
  uint64_t ready_bytes = 0;
  uint64_t capacity_bytes = 0;
};

// ---- memory sharing ----

// A POSIX shared memory region (host backend), e.g. a HostKvMemory.
struct HostShm {
  std::string name;  // shm_open name, "/kvstash-1234-0"
  uint64_t size_bytes = 0;
};

// A CUDA allocation shared through cudaIpcGetMemHandle (CUDA backend).
struct CudaIpc {
  std::array<uint8_t, 64> ipc_handle{};  // cudaIpcMemHandle_t of the allocation base
  uint64_t size_bytes = 0;               // size of the allocation behind it
  std::array<uint8_t, 16> gpu_uuid{};
};

// Memory of the calling process named by one of its open descriptors: a
// memfd or an unlinked shared-memory file (host backend, ipc sockets only).
// The descriptor must stay open while the registration lives: libkvstash
// registers it again after a daemon restart.
struct PeerFd {
  int fd = -1;
  uint64_t size_bytes = 0;
};

using Allocation = std::variant<HostShm, CudaIpc, PeerFd>;

// One engine layer: where it lives and how it is laid out.
struct LayerDesc {
  uint32_t allocation = 0;    // index into RegisterOptions::allocations
  uint64_t offset_bytes = 0;  // layer base inside the allocation
  LayerGeometry geometry;
};

struct RegisterOptions {
  std::string model;        // part of the key namespace
  std::string tenant_salt;  // optional, part of the key namespace
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  // Every tensor-parallel rank holds the same KV (an MLA latent): chunks are
  // stored once per model, shared by all ranks. Say so only when it is true:
  // a rank that loads another rank's KV computes garbage without an error.
  bool replicated_across_ranks = false;
  std::vector<Allocation> allocations;
  std::vector<LayerDesc> layers;
  // A completion board (kvstash::CompletionBoard::shm()) for GPU-side
  // completion of this registration's stores and retrieves; it must outlive
  // the registration. Empty name: none.
  HostShm board;
};

// One engine rank's registered KV memory, as the daemon laid it out.
struct RegisteredKv {
  uint64_t id = 0;
  uint32_t chunk_tokens = 0;
  uint64_t chunk_bytes = 0;
  uint32_t block_tokens = 0;
  std::vector<ChunkGroup> groups;  // offsets inside the flat chunk
  Fingerprint layout_fingerprint{};
  ChunkKey namespace_id{};  // seed of the key chain
};

// ---- store / retrieve ----

// One chunk of a request: chunk i covers the request's tokens
// [i * chunk_tokens, ...); token t of it lives in block_ids[t / block_tokens].
struct ChunkBlocks {
  ChunkKey key{};
  uint32_t num_tokens = 0;  // Store: tokens in the chunk; Retrieve: ignored
  std::vector<uint32_t> block_ids;
};

// One chunk of a request where its caller keeps it.
struct ChunkRef {
  const uint8_t* key = nullptr;  // the 32 bytes of a ChunkKey
  uint32_t num_tokens = 0;
  const uint32_t* block_ids = nullptr;  // [num_block_ids]; null only with 0 ids
  uint32_t num_block_ids = 0;
};

// The chunks of one Store or Retrieve, read in place: their block ids go
// from the caller's memory into the request's message with no copy between.
// A std::vector<ChunkBlocks> converts to it; any other table of chunks (the
// C API's kvstash_chunk) is read through an accessor. It views and never
// owns: what it views must stay valid until the call taking it returns.
class ChunkList {
 public:
  // Entry i of `table`.
  using At = ChunkRef (*)(const void* table, size_t i);

  ChunkList(const std::vector<ChunkBlocks>& chunks)  // NOLINT(google-explicit-constructor)
      : table_(chunks.data()), size_(chunks.size()), at_(&AtBlocks) {}
  // Store(id, {a, b}): the list lives until the call returns.
  ChunkList(std::initializer_list<ChunkBlocks> chunks)  // NOLINT(google-explicit-constructor)
      : table_(chunks.begin()), size_(chunks.size()), at_(&AtBlocks) {}
  ChunkList(const void* table, size_t size, At at) : table_(table), size_(size), at_(at) {}

  size_t size() const { return size_; }
  ChunkRef operator[](size_t i) const { return at_(table_, i); }

 private:
  static ChunkRef AtBlocks(const void* table, size_t i) {
    const ChunkBlocks& c = static_cast<const ChunkBlocks*>(table)[i];
    return ChunkRef{c.key.data(), c.num_tokens, c.block_ids.data(), uint32_t(c.block_ids.size())};
  }

  const void* table_;
  size_t size_;
  At at_;
};

// ChunkResult (kStored, kAlreadyPresent, kSkippedNoRoom, kRetrieved,
// kMissing, kFailed) and its NameOf() are generated from the wire schema
// into kvstash/wire_enums.h.

struct ChunkOutcome {
  ChunkResult result = ChunkResult::kFailed;
  uint32_t num_tokens = 0;  // tokens stored or written
  Status error;             // set with kFailed
};

// Where the daemon found a chunk (TierLevel, generated from the schema into
// kvstash/wire_enums.h): L1 its pinned host memory, L2 its local disk, L3 the
// shared Redis / Valkey store.

struct LookupResult {
  uint32_t hit_chunks = 0;
  uint64_t hit_tokens = 0;
  uint64_t lease_id = 0;  // 0 when nothing hit
  uint32_t lease_expires_ms = 0;
  // One per hit chunk, in order: L1 hits first, then L2, then L3.
  std::vector<TierLevel> hit_tiers;
  // Hit chunks still being promoted into L1 (a prefetch in progress); 0
  // once every prefetched chunk has landed.
  uint32_t prefetch_pending = 0;
  // The prefix stopped at the daemon's leased-bytes budget
  // (--max-leased-share) before a stored key: fewer hits than stored.
  bool lease_truncated = false;
  // Hit chunks found in `level`.
  uint32_t CountIn(TierLevel level) const;
};

struct StatsResult {
  std::vector<std::pair<std::string, uint64_t>> counters;  // name, value
  std::string json;                                        // the same figures with derived rates
};

}  // namespace kvstash
