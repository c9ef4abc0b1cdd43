// kvstash::Client: an engine's connection to kvstashd (libkvstash).
//
//   auto client = kvstash::Client::Connect({}).value();
//   kvstash::RegisteredKv reg = client->RegisterKV(options).get().value();
//   auto chunks = kvstash::PromptChunks(reg, tokens, n, block_table, num_blocks);
//   auto outcomes = client->Store(reg.id, chunks).get();
//
// Every call returns a future at once (or takes a callback); many requests
// may be in flight. Each is always completed: with the reply, the daemon's
// error, TimedOut when no reply came within ClientOptions::request_timeout
// (also the request's deadline on the wire), Unavailable when kvstashd said
// Goodbye, died, hung for about a second, or is not reachable (then new
// requests fail at once), or Cancelled when the Client is destroyed first.
// Whatever the outcome, once a Store or Retrieve is completed kvstashd
// touches none of its blocks: the engine may reuse them at once (a hung
// daemon's copy in progress holds its request until it resumes or dies;
// docs/protocol.md, "The copy fence").
// After kvstashd restarts, the client registers its registrations again by
// itself, under the same ids (docs/protocol.md, "Client behaviour").
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <future>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "kvstash/client_types.h"
#include "kvstash/endpoint.h"
#include "kvstash/gpu_completion.h"
#include "kvstash/keys.h"
#include "kvstash/log_sink.h"
#include "kvstash/status.h"

namespace kvstash {

struct ClientOptions {
  // Empty: $KVSTASH_SOCKET, then kDefaultSocket. A plain path means that ipc
  // socket (kvstash::ClientEndpoint).
  std::string socket;
  std::chrono::milliseconds request_timeout{5000};
  std::string client_name;  // shown in the daemon's logs
  LogSink log;              // empty: the library logs nothing
  // The spin window: microseconds the client's I/O thread keeps polling, on
  // a core, after its last message instead of sleeping; while replies are
  // awaited it polls for up to 20 windows. Saves the thread's wake-ups (tens
  // of microseconds on some virtual machines); an idle client sleeps.
  // 0: never poll (docs/deployment.md "Spinning").
  uint32_t busy_poll_us = 50;
  // On an ipc socket, after Hello, carry requests and replies through rings
  // in shared memory rather than ZeroMQ whenever both sides poll
  // (docs/protocol.md "Shared-memory channel"). KVSTASH_SHM_CHANNEL=off in
  // the environment turns it off too. Remote (tcp) clients never use it.
  bool shm_channel = true;
};

// Thread-safe: any thread may call any method. One I/O thread, owned by the
// Client, owns the socket; calls hand it their encoded requests.
class Client {
 public:
  // Connects and says Hello (protocol version check). Fails with Unavailable
  // naming the endpoint at once when nothing listens there (no socket file,
  // a stale one), UnsupportedVersion on a version mismatch.
  static Result<std::unique_ptr<Client>> Connect(ClientOptions options);

  // Fails requests still pending with Cancelled and joins the I/O thread.
  ~Client();
  Client(const Client&) = delete;
  Client& operator=(const Client&) = delete;

  // The latest Hello reply. Its boot_id changes when kvstashd restarted;
  // `restarts` counts those changes. After a restart the client registers
  // every live registration again by itself before it sends anything else,
  // and keeps their ids (docs/protocol.md "Client behaviour on restart").
  ServerInfo server_info() const;

  // Callbacks: `done` runs exactly once, on the client's I/O thread (on the
  // calling thread when the call fails before it is queued, or when the
  // Client is already closing). It must return quickly and must not wait on
  // this Client (it runs on the thread that completes every request).
  template <typename T>
  using Done = std::function<void(T)>;

  std::future<Result<RegisteredKv>> RegisterKV(const RegisterOptions& options);
  std::future<Status> UnregisterKV(uint64_t registration_id);

  // One outcome per chunk, in request order.
  std::future<Result<std::vector<ChunkOutcome>>> Store(uint64_t registration_id,
                                                       const ChunkList& chunks);
  // skip_tokens: tokens at the front of the request already in engine memory.
  // lease_id (from Lookup) is released when the retrieve ends.
  std::future<Result<std::vector<ChunkOutcome>>> Retrieve(uint64_t registration_id,
                                                          const ChunkList& chunks,
                                                          uint32_t skip_tokens = 0,
                                                          uint64_t lease_id = 0);
  // Longest stored prefix of keys, across L1, L2 and L3; pins it for
  // lease_ms (0: server default). prefetch: start promoting the prefix's
  // L2/L3 chunks into L1 now; a later Lookup of the same keys reports how
  // many are still on their way (LookupResult::prefetch_pending).
  std::future<Result<LookupResult>> Lookup(uint64_t registration_id,
                                           const std::vector<ChunkKey>& keys, uint32_t lease_ms = 0,
                                           bool prefetch = false);
  // Returns the number of chunks the lease held.
  std::future<Result<uint32_t>> Release(uint64_t lease_id);

  // The same four calls completing through a callback instead of a future:
  // no thread waits per call (see Done above).
  void Store(uint64_t registration_id, const ChunkList& chunks,
             Done<Result<std::vector<ChunkOutcome>>> done);
  void Retrieve(uint64_t registration_id, const ChunkList& chunks, uint32_t skip_tokens,
                uint64_t lease_id, Done<Result<std::vector<ChunkOutcome>>> done);
  void Lookup(uint64_t registration_id, const std::vector<ChunkKey>& keys, uint32_t lease_ms,
              Done<Result<LookupResult>> done);
  void Lookup(uint64_t registration_id, const std::vector<ChunkKey>& keys, uint32_t lease_ms,
              bool prefetch, Done<Result<LookupResult>> done);
  void Release(uint64_t lease_id, Done<Result<uint32_t>> done);

  // GPU-side completion on `board` (kvstash/gpu_completion.h), which the
  // registration names. Both return once the request is queued; the CPU
  // reply comes in GpuTransfer::outcomes as for Retrieve and Store. On an
  // error reply, a timeout or a lost daemon, libkvstash releases the slots
  // itself with the error in their status words, so no stream waits forever.
  //
  // Retrieve: with layer_ranges = 1 and a stream (cudaStream_t), the stream
  // is made to wait for the data before this returns. With layer_ranges > 1
  // the engine waits per range: board.WaitLayerRange(stream, signal, k)
  // before it reads layers [LayerRangeBegin(L, R, k), LayerRangeBegin(L, R,
  // k + 1)) of the registration's L layers. stream may be null (CPU: poll
  // board.Released).
  Result<GpuTransfer> RetrieveOnStream(uint64_t registration_id, const ChunkList& chunks,
                                       CompletionBoard& board, void* stream,
                                       uint32_t skip_tokens = 0, uint64_t lease_id = 0,
                                       uint32_t layer_ranges = 1);
  // Store: the daemon's gather waits until `stream` (cudaStream_t) reaches
  // the point of this call, with no host sync in the engine; then
  // board.WaitReusable(stream, signal) makes a stream wait until the blocks
  // may be overwritten. A null stream leaves the gate to the caller
  // (board.Release(signal.slot, signal.sequence, 0) from the CPU). A gate
  // never released is released by kvstashd at the request's deadline or
  // when the engine is judged gone; its chunks are reported Failed, never
  // stored.
  Result<GpuTransfer> StoreOnStream(uint64_t registration_id, const ChunkList& chunks,
                                    CompletionBoard& board, void* stream);
  // The same two completing through a callback; they return the request's
  // slots, or an error (then `done` never runs and nothing was sent).
  Result<BoardSignal> RetrieveOnStream(uint64_t registration_id, const ChunkList& chunks,
                                       CompletionBoard& board, void* stream, uint32_t skip_tokens,
                                       uint64_t lease_id, uint32_t layer_ranges,
                                       Done<Result<std::vector<ChunkOutcome>>> done);
  Result<BoardSignal> StoreOnStream(uint64_t registration_id, const ChunkList& chunks,
                                    CompletionBoard& board, void* stream,
                                    Done<Result<std::vector<ChunkOutcome>>> done);

  // Empty model: everything. Returns the number of chunks dropped.
  std::future<Result<uint64_t>> Clear(const std::string& model = {},
                                      const std::string& tenant_salt = {});
  std::future<Result<std::string>> Describe();  // JSON
  std::future<Result<StatsResult>> Stats();
  std::future<Result<uint64_t>> Ping();  // daemon uptime in ms
  // The L1 pool's readiness (a Ping: answered at once).
  std::future<Result<PoolReadiness>> PoolReady();

 private:
  class Impl;
  explicit Client(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Keys of every chunk of tokens[0:n] (the last one partial when n is not a
// multiple of chunk_tokens), chained from the registration's namespace.
std::vector<ChunkKey> ChunkKeys(const RegisteredKv& registration, const int32_t* tokens,
                                size_t num_tokens);

// The chunks of a prompt whose token t lives in block_table[t / block_tokens]:
// keys, token counts and block ids, ready for Store or Retrieve. InvalidArgument
// when block_table has fewer than ceil(num_tokens / block_tokens) entries.
Result<std::vector<ChunkBlocks>> PromptChunks(const RegisteredKv& registration,
                                              const int32_t* tokens, size_t num_tokens,
                                              const uint32_t* block_table, size_t block_table_size);

}  // namespace kvstash
