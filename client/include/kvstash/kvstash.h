/* kvstash C API (libkvstash.so): the client library for engines written in
 * languages other than C++ (Python through ctypes or cffi, Rust, Go).
 *
 * Plain calls are synchronous: each returns once kvstashd replied, the
 * request timed out, or the connection failed; *_submit calls return at once
 * (see "asynchronous calls"). A handle may be used from several threads at
 * once. If kvstashd stops (it says Goodbye), dies or hangs, the library
 * notices within about a second, fails what was pending with
 * KVSTASH_UNAVAILABLE, fails new calls with it at once while no daemon
 * answers, and reconnects; after a restart it registers the live
 * registrations again under the same ids before it sends anything else
 * (docs/protocol.md, "Client behaviour"). Every call returns a
 * kvstash_status (the wire protocol's ErrorCode values); after a failure,
 * kvstash_last_error(client) says why.
 *
 *   kvstash_client* client = NULL;
 *   kvstash_options options = KVSTASH_OPTIONS_INIT;
 *   options.client_name = "my-engine";
 *   if (kvstash_connect(&options, &client) != KVSTASH_OK)
 *     fprintf(stderr, "%s\n", kvstash_last_error(client));
 *   ...
 *   kvstash_close(client);
 *
 * The ABI (libkvstash.so.1; KVSTASH_ABI_VERSION). An engine built against an
 * older kvstash.h of the same soname keeps working with a newer library, and
 * one it cannot serve is refused with KVSTASH_INVALID_ARGUMENT, never a
 * crash:
 * - The structs that may grow (kvstash_options, kvstash_register_options,
 *   kvstash_registration, kvstash_lookup_result, kvstash_server_info) begin
 *   with `size_t struct_size`, which the caller sets to sizeof the struct as
 *   its kvstash.h declares it: start from the KVSTASH_*_INIT initialisers.
 * - Fields are added only at their end, past the previous sizeof (never in
 *   trailing padding), and never removed or moved. The library reads and
 *   writes only the first struct_size bytes: on input, fields past them are
 *   taken as zero; on output, they are left as the caller set them.
 * - It refuses with KVSTASH_INVALID_ARGUMENT, naming the struct, a
 *   struct_size short of the struct's first version, or (on input) longer
 *   than this library knows with non-zero bytes past what it knows (a newer
 *   engine asking for something this library lacks). An engine built
 *   against libkvstash.so.0's kvstash.h, whose structs began with a pointer,
 *   is refused so at kvstash_connect.
 * - Every other struct (kvstash_geometry, kvstash_allocation, kvstash_layer,
 *   kvstash_cuda_layer, kvstash_key, kvstash_chunk, kvstash_chunk_outcome,
 *   kvstash_board_signal: those passed in arrays or nested, and the small
 *   signal), every value already given to an enum or flag, and every
 *   function signature are fixed for the soname: changing one changes the
 *   soname and KVSTASH_ABI_VERSION.
 * - Functions are only added within the soname, never removed: an engine
 *   that calls a newer function (kvstash_chunk_keys_after, say) needs a
 *   library that has it, which the dynamic linker checks when it loads.
 */
#ifndef KVSTASH_KVSTASH_H_
#define KVSTASH_KVSTASH_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define KVSTASH_API __attribute__((visibility("default")))
#else
#define KVSTASH_API
#endif

/* The soname's number: libkvstash.so.1. */
#define KVSTASH_ABI_VERSION 1

#define KVSTASH_DEFAULT_SOCKET "ipc:///run/kvstash/kvstash.sock"
/* kvstash_options.busy_poll_us: the I/O thread never polls on a core. */
#define KVSTASH_NEVER_SPIN 0xFFFFFFFFu

/* The wire protocol's ErrorCode values (proto/kvstash.fbs). */
typedef enum kvstash_status {
  KVSTASH_OK = 0,
  KVSTASH_INVALID_ARGUMENT = 1,
  KVSTASH_MALFORMED_MESSAGE = 2,
  KVSTASH_UNSUPPORTED_VERSION = 3,
  KVSTASH_NOT_FOUND = 4,
  KVSTASH_OUT_OF_RANGE = 5,
  KVSTASH_TOO_LARGE = 6,
  KVSTASH_RESOURCE_EXHAUSTED = 7,
  KVSTASH_UNAVAILABLE = 8,
  KVSTASH_DEVICE_ERROR = 9,
  KVSTASH_TIMED_OUT = 10,
  KVSTASH_INTERNAL = 11,
  KVSTASH_CANCELLED = 12
} kvstash_status;

/* Element types (the wire's DType values). */
enum {
  KVSTASH_DTYPE_U8 = 0,
  KVSTASH_DTYPE_I8 = 1,
  KVSTASH_DTYPE_F8E4M3 = 2,
  KVSTASH_DTYPE_F8E5M2 = 3,
  KVSTASH_DTYPE_F16 = 4,
  KVSTASH_DTYPE_BF16 = 5,
  KVSTASH_DTYPE_F32 = 6
};

/* Per-chunk results (the wire's ChunkResult values). */
enum {
  KVSTASH_CHUNK_STORED = 0,
  KVSTASH_CHUNK_ALREADY_PRESENT = 1,
  KVSTASH_CHUNK_SKIPPED_NO_ROOM = 2,
  KVSTASH_CHUNK_RETRIEVED = 3,
  KVSTASH_CHUNK_MISSING = 4,
  KVSTASH_CHUNK_FAILED = 5
};

/* Allocation kinds. */
enum {
  KVSTASH_ALLOCATION_SHM = 0,
  KVSTASH_ALLOCATION_CUDA_IPC = 1,
  KVSTASH_ALLOCATION_PEER_FD = 2
};

typedef struct kvstash_client kvstash_client;

/* Start from KVSTASH_OPTIONS_INIT and set what you need. */
typedef struct kvstash_options {
  size_t struct_size; /* sizeof(kvstash_options): see "The ABI" above */
  /* NULL or "": $KVSTASH_SOCKET, then KVSTASH_DEFAULT_SOCKET. A plain path
   * ("/run/kvstash/kvstash.sock") means that ipc socket. */
  const char* socket;
  /* Per request: the request's deadline (Envelope.deadline_ns) is now plus
   * this; kvstashd starts none of its work after it, and the call returns
   * KVSTASH_TIMED_OUT then. 0: 5000. */
  uint32_t timeout_ms;
  const char* client_name; /* shown in the daemon's logs; may be NULL */
  /* The spin window: microseconds the client's I/O thread polls on a core
   * after its last message instead of sleeping, and up to 20 windows while
   * replies are awaited (fewer wake-ups; an idle client sleeps).
   * 0: the default, 50; KVSTASH_NEVER_SPIN: never. */
  uint32_t busy_poll_us;
} kvstash_options;
#define KVSTASH_OPTIONS_INIT \
  { sizeof(kvstash_options) }

/* Layer geometry in bytes (docs/protocol.md "Geometry"):
 * address(b, k, t, h) = base + b*block_stride + k*kv_stride + t*token_stride
 *                            + h*head_stride, head_bytes contiguous bytes. */
typedef struct kvstash_geometry {
  uint32_t num_blocks;
  uint32_t kv_count; /* 2 = K and V, 1 = MLA latent */
  uint32_t block_tokens;
  uint32_t num_heads;
  uint32_t head_bytes;
  uint64_t block_stride;
  uint64_t kv_stride;
  uint64_t token_stride;
  uint64_t head_stride;
  uint8_t dtype; /* KVSTASH_DTYPE_* */
} kvstash_geometry;

/* One shared memory region holding one or more layers. Fill these by hand
 * for host (POSIX shm) memory; for GPU memory use kvstash_register_options'
 * cuda_layers, which shares CUDA allocations for you. */
typedef struct kvstash_allocation {
  uint32_t kind;          /* KVSTASH_ALLOCATION_* */
  int32_t fd;             /* PEER_FD: an open descriptor of this process, a memfd or
                             unlinked shared-memory file (host backend, ipc socket);
                             kept open while registered. Lies where ABI 1 had padding:
                             the struct's size and other offsets are unchanged. */
  const char* shm_name;   /* SHM: shm_open name, "/kvstash-1234-0" */
  uint64_t size_bytes;    /* both kinds */
  uint8_t ipc_handle[64]; /* CUDA_IPC: cudaIpcMemHandle_t of the allocation base */
  uint8_t gpu_uuid[16];   /* CUDA_IPC */
} kvstash_allocation;

typedef struct kvstash_layer {
  uint32_t allocation;   /* index into kvstash_register_options.allocations */
  uint64_t offset_bytes; /* layer base inside the allocation */
  kvstash_geometry geometry;
} kvstash_layer;

/* A layer in GPU memory, named by its device address: the library finds the
 * CUDA allocation holding it (cuMemGetAddressRange), shares each allocation
 * once through CUDA IPC whatever number of layers it holds, and describes
 * the layer by its offset inside it and the GPU's UUID. */
typedef struct kvstash_cuda_layer {
  const void* data; /* device address of block 0, kv 0, token 0, head 0 */
  kvstash_geometry geometry;
} kvstash_cuda_layer;

/* Start from KVSTASH_REGISTER_OPTIONS_INIT. Give either allocations + layers
 * (shared memory described by hand) or cuda_layers (GPU memory by device
 * address), not both. */
typedef struct kvstash_register_options {
  size_t struct_size;      /* sizeof(kvstash_register_options) */
  const char* model;       /* part of the key namespace; required */
  const char* tenant_salt; /* may be NULL; never leaves the daemon */
  uint32_t tp_rank;
  uint32_t tp_size; /* 0 is taken as 1 */
  const kvstash_allocation* allocations;
  size_t num_allocations;
  const kvstash_layer* layers;
  size_t num_layers;
  /* GPU memory. Errors: KVSTASH_UNAVAILABLE without CUDA in this build or
   * no driver; KVSTASH_INVALID_ARGUMENT for memory that CUDA IPC cannot
   * share (virtual-memory allocations such as PyTorch's expandable
   * segments: set PYTORCH_CUDA_ALLOC_CONF=expandable_segments:False), or
   * layers on several GPUs; KVSTASH_OUT_OF_RANGE for an extent past the end
   * of its allocation. */
  const kvstash_cuda_layer* cuda_layers;
  size_t num_cuda_layers;
  /* A completion board for GPU-side completion (kvstash_board_create); may
   * be NULL. It must outlive the registration. */
  const struct kvstash_board* board;
  /* 1: every tensor-parallel rank holds the same KV (an MLA latent), so its
   * chunks are stored once per model and shared by all ranks; tp_rank and
   * tp_size stay out of the key namespace. 0: per rank. Never set it for
   * per-rank heads (an SGLang token pool's K and V, though their kv_count is
   * 1 as well): a rank would load another rank's KV without any error. */
  uint32_t replicated_across_ranks;
} kvstash_register_options;
#define KVSTASH_REGISTER_OPTIONS_INIT \
  { sizeof(kvstash_register_options) }

/* Filled by kvstash_register: set struct_size first
 * (KVSTASH_REGISTRATION_INIT). */
typedef struct kvstash_registration {
  size_t struct_size; /* sizeof(kvstash_registration) */
  uint64_t id;
  uint32_t chunk_tokens;
  uint32_t block_tokens;
  uint64_t chunk_bytes;
  uint32_t num_groups;
  uint8_t layout_fingerprint[32];
  uint8_t namespace_id[32]; /* seed of the key chain */
} kvstash_registration;
#define KVSTASH_REGISTRATION_INIT \
  { sizeof(kvstash_registration) }

typedef struct kvstash_key {
  uint8_t bytes[32];
} kvstash_key;

/* Chunk i of a request covers its tokens [i*chunk_tokens, ...); token t of
 * the chunk lives in block_ids[t / block_tokens]. block_ids is only read
 * during the call. */
typedef struct kvstash_chunk {
  kvstash_key key;
  uint32_t num_tokens; /* store: tokens in the chunk; retrieve: ignored */
  const uint32_t* block_ids;
  uint32_t num_block_ids;
} kvstash_chunk;

typedef struct kvstash_chunk_outcome {
  uint8_t result;       /* KVSTASH_CHUNK_* */
  uint32_t num_tokens;  /* tokens stored or written */
  kvstash_status error; /* with KVSTASH_CHUNK_FAILED */
} kvstash_chunk_outcome;

/* Set struct_size first (KVSTASH_LOOKUP_RESULT_INIT). */
typedef struct kvstash_lookup_result {
  size_t struct_size; /* sizeof(kvstash_lookup_result) */
  uint32_t hit_chunks;
  uint64_t hit_tokens;
  uint64_t lease_id; /* 0 when nothing hit */
  uint32_t lease_expires_ms;
  /* Where the hits are: the prefix holds l1_chunks chunks found in L1 (the
   * daemon's pinned memory), then l2_chunks in L2 (its local disk), then
   * l3_chunks in L3 (the shared Redis / Valkey store). */
  uint32_t l1_chunks;
  uint32_t l2_chunks;
  uint32_t l3_chunks;
  /* Hit chunks still being promoted into L1 by a prefetch; 0 once done. */
  uint32_t prefetch_pending;
  /* 1: the leased prefix stopped at the daemon's leased-bytes budget
   * (--max-leased-share) although the next key is stored (fewer hits than
   * stored). Left 0 by a libkvstash that predates it. */
  uint32_t lease_truncated;
} kvstash_lookup_result;
#define KVSTASH_LOOKUP_RESULT_INIT \
  { sizeof(kvstash_lookup_result) }

/* kvstash_lookup_ex flags. */
#define KVSTASH_LOOKUP_PREFETCH 1u /* start promoting L2/L3 hits into L1 */

/* What the daemon said in its latest Hello, and what this client saw. Set
 * struct_size first (KVSTASH_SERVER_INFO_INIT). */
typedef struct kvstash_server_info {
  size_t struct_size; /* sizeof(kvstash_server_info) */
  uint32_t protocol_version;
  char server_version[32]; /* NUL-terminated */
  uint8_t boot_id[16];     /* new on every daemon start */
  uint32_t chunk_tokens;
  uint32_t max_chunks_per_request;
  uint64_t max_message_bytes;
  char backend[16]; /* "host" or "cuda", NUL-terminated */
  uint32_t peer_timeout_ms;
  /* Daemon restarts this client has seen (boot id changes). After each, the
   * library registered every live registration again by itself: their ids
   * stay valid, chunks stored before are gone. */
  uint32_t restarts;
} kvstash_server_info;
#define KVSTASH_SERVER_INFO_INIT \
  { sizeof(kvstash_server_info) }

/* ---- connection ---- */

/* KVSTASH_ABI_VERSION of the loaded library, to compare with the header's. */
KVSTASH_API uint32_t kvstash_abi_version(void);

/* Connects and says Hello. Like sqlite3_open, *client is set even when this
 * fails (NULL only if memory ran out), so that kvstash_last_error can say
 * why; close it with kvstash_close either way. Fails at once with
 * KVSTASH_UNAVAILABLE naming the socket when nothing listens there (no
 * socket file, or a stale one), whatever timeout_ms says. */
KVSTASH_API kvstash_status kvstash_connect(const kvstash_options* options, kvstash_client** client);
/* Fails requests still pending with KVSTASH_CANCELLED; NULL is ignored. */
KVSTASH_API void kvstash_close(kvstash_client* client);
/* The message of the calling thread's last call on this handle ("" after a
 * success). Valid until that thread's next call on the handle. */
KVSTASH_API const char* kvstash_last_error(kvstash_client* client);
/* "OutOfRange" for KVSTASH_OUT_OF_RANGE. */
KVSTASH_API const char* kvstash_status_name(kvstash_status status);
KVSTASH_API kvstash_status kvstash_ping(kvstash_client* client, uint64_t* uptime_ms);
KVSTASH_API kvstash_status kvstash_get_server_info(kvstash_client* client,
                                                   kvstash_server_info* info);

/* ---- operations ---- */

/* JSON text (the same as `kvstash describe --json` / `stats --json`) in a
 * buffer the caller frees with kvstash_free. */
KVSTASH_API kvstash_status kvstash_describe(kvstash_client* client, char** json);
KVSTASH_API kvstash_status kvstash_stats(kvstash_client* client, char** json);
KVSTASH_API void kvstash_free(void* buffer);
/* Drops stored chunks: model NULL or "" means every scope this client may
 * clear (see docs/protocol.md "Trust"); *cleared may be NULL. */
KVSTASH_API kvstash_status kvstash_clear(kvstash_client* client, const char* model,
                                         const char* tenant_salt, uint64_t* cleared);
/* Readiness: L1 bytes pinned and usable so far, of its capacity. The daemon
 * answers at once and pins its pool in the background; stores find room as
 * it grows. Either pointer may be NULL. */
KVSTASH_API kvstash_status kvstash_pool_ready(kvstash_client* client, uint64_t* ready_bytes,
                                              uint64_t* capacity_bytes);

/* ---- registration ---- */

KVSTASH_API kvstash_status kvstash_register(kvstash_client* client,
                                            const kvstash_register_options* options,
                                            kvstash_registration* registration);
KVSTASH_API kvstash_status kvstash_unregister(kvstash_client* client, uint64_t registration_id);

/* ---- keys (no I/O) ---- */

/* Chunks covering num_tokens tokens: ceil(num_tokens / chunk_tokens). */
KVSTASH_API size_t kvstash_num_chunks(const kvstash_registration* registration, size_t num_tokens);
/* Writes kvstash_num_chunks(...) chained keys of tokens[0:num_tokens]. */
KVSTASH_API kvstash_status kvstash_chunk_keys(const kvstash_registration* registration,
                                              const int32_t* tokens, size_t num_tokens,
                                              kvstash_key* keys);
/* Fills kvstash_num_chunks(...) chunks of a prompt whose token t lives in
 * block_table[t / block_tokens]: keys, token counts, and block_ids pointing
 * into block_table (which must outlive their use). */
KVSTASH_API kvstash_status kvstash_prompt_chunks(const kvstash_registration* registration,
                                                 const int32_t* tokens, size_t num_tokens,
                                                 const uint32_t* block_table,
                                                 size_t block_table_size, kvstash_chunk* chunks);
/* kvstash_chunk_keys continuing a chain: tokens[0:num_tokens] are a prompt's
 * tokens from a chunk boundary on, and *previous is the key of the chunk
 * just before them (a full chunk); previous NULL means they begin the prompt
 * (kvstash_chunk_keys). Keys come out as if the whole prompt were hashed from
 * token 0, in work proportional to num_tokens: an engine that keeps the last
 * key of what it already keyed pays only for new tokens. */
KVSTASH_API kvstash_status kvstash_chunk_keys_after(const kvstash_registration* registration,
                                                    const kvstash_key* previous,
                                                    const int32_t* tokens, size_t num_tokens,
                                                    kvstash_key* keys);
/* kvstash_prompt_chunks continuing a chain: block_table[i] holds tokens
 * [i*block_tokens, (i+1)*block_tokens) of tokens (both start at the same
 * chunk boundary). */
KVSTASH_API kvstash_status kvstash_prompt_chunks_after(
    const kvstash_registration* registration, const kvstash_key* previous, const int32_t* tokens,
    size_t num_tokens, const uint32_t* block_table, size_t block_table_size, kvstash_chunk* chunks);

/* ---- data ---- */

/* outcomes has num_chunks entries, filled in request order. */
KVSTASH_API kvstash_status kvstash_store(kvstash_client* client, uint64_t registration_id,
                                         const kvstash_chunk* chunks, size_t num_chunks,
                                         kvstash_chunk_outcome* outcomes);
KVSTASH_API kvstash_status kvstash_retrieve(kvstash_client* client, uint64_t registration_id,
                                            const kvstash_chunk* chunks, size_t num_chunks,
                                            uint32_t skip_tokens, uint64_t lease_id,
                                            kvstash_chunk_outcome* outcomes);
/* The longest stored prefix of keys; flags: 0 or KVSTASH_LOOKUP_PREFETCH.
 * Ask again with the same keys to learn whether a prefetch completed
 * (prefetch_pending == 0). */
KVSTASH_API kvstash_status kvstash_lookup_ex(kvstash_client* client, uint64_t registration_id,
                                             const kvstash_key* keys, size_t num_keys,
                                             uint32_t lease_ms, uint32_t flags,
                                             kvstash_lookup_result* result);
KVSTASH_API kvstash_status kvstash_release(kvstash_client* client, uint64_t lease_id);

/* ---- asynchronous calls ----
 *
 * A *_submit call returns at once with a kvstash_call; the request is in
 * flight. Its arguments (chunks, block ids, keys) are copied before the
 * submit returns. Wait for it with kvstash_call_wait, poll it with
 * kvstash_call_done, or wait on kvstash_completion_fd and collect completed
 * calls with kvstash_take_completed (asyncio's add_reader, an epoll loop).
 * Every call completes exactly once: with the reply, the daemon's error,
 * KVSTASH_TIMED_OUT at its deadline, KVSTASH_UNAVAILABLE when the daemon
 * went away, or KVSTASH_CANCELLED when the client is closed. Free each call
 * with kvstash_call_free; freeing one still in flight abandons its result
 * (the request itself still runs). Calls are thread-safe. */

typedef struct kvstash_call kvstash_call;

/* user_data is returned by kvstash_call_user_data: a tag for the caller. */
KVSTASH_API kvstash_status kvstash_store_submit(kvstash_client* client, uint64_t registration_id,
                                                const kvstash_chunk* chunks, size_t num_chunks,
                                                uint64_t user_data, kvstash_call** call);
KVSTASH_API kvstash_status kvstash_retrieve_submit(kvstash_client* client, uint64_t registration_id,
                                                   const kvstash_chunk* chunks, size_t num_chunks,
                                                   uint32_t skip_tokens, uint64_t lease_id,
                                                   uint64_t user_data, kvstash_call** call);
KVSTASH_API kvstash_status kvstash_lookup_ex_submit(kvstash_client* client,
                                                    uint64_t registration_id,
                                                    const kvstash_key* keys, size_t num_keys,
                                                    uint32_t lease_ms, uint32_t flags,
                                                    uint64_t user_data, kvstash_call** call);
KVSTASH_API kvstash_status kvstash_release_submit(kvstash_client* client, uint64_t lease_id,
                                                  uint64_t user_data, kvstash_call** call);

/* 1 once the call completed, else 0. */
KVSTASH_API int kvstash_call_done(const kvstash_call* call);
/* Waits up to timeout_ms (UINT32_MAX: until it completes) for the call;
 * returns 1 if it completed, 0 if it is still in flight. */
KVSTASH_API int kvstash_call_wait(kvstash_call* call, uint32_t timeout_ms);
KVSTASH_API uint64_t kvstash_call_user_data(const kvstash_call* call);
/* The completed call's result (KVSTASH_UNAVAILABLE... while in flight: check
 * kvstash_call_done first) and its message ("" on success); the message
 * lives as long as the call. */
KVSTASH_API kvstash_status kvstash_call_status(const kvstash_call* call);
KVSTASH_API const char* kvstash_call_error(const kvstash_call* call);
/* Store and retrieve: copies min(capacity, chunks) outcomes in request
 * order; returns the number of chunks of the request. */
KVSTASH_API size_t kvstash_call_outcomes(const kvstash_call* call, kvstash_chunk_outcome* outcomes,
                                         size_t capacity);
/* Lookup: its result. Release: result->hit_chunks holds the released count. */
KVSTASH_API kvstash_status kvstash_call_lookup_result(const kvstash_call* call,
                                                      kvstash_lookup_result* result);
KVSTASH_API void kvstash_call_free(kvstash_call* call);

/* A file descriptor that is readable while completed calls wait to be taken
 * with kvstash_take_completed. Owned by the client: do not close it. */
KVSTASH_API int kvstash_completion_fd(kvstash_client* client);
/* Moves up to max completed, not yet taken, not freed calls into calls[], in
 * completion order, and returns how many. A call is taken at most once; a
 * call freed first is never returned. Calls collected with kvstash_call_wait
 * are takeable too until freed: on one handle, collect calls one way, or
 * free each call in one place only. */
KVSTASH_API size_t kvstash_take_completed(kvstash_client* client, kvstash_call** calls, size_t max);

/* ---- GPU-side completion (docs/protocol.md "GPU-side completion") ----
 *
 * A board is a small array of slots in shared memory that the engine's and
 * the daemon's GPU streams write and wait on. A retrieve releases its slots
 * (one per layer range) once the data is in engine memory; a store waits
 * for the engine's stream and releases a slot once the blocks may be
 * reused. A failed request still releases every slot, with its error in the
 * slot's status word (0 = OK, else a kvstash_status), so no stream waits
 * forever. Streams are cudaStream_t passed as void*.
 *
 * Before trusting the KV, an engine checks the call's outcomes (the CPU
 * reply; every chunk KVSTASH_CHUNK_RETRIEVED) or, off the CPU path, every
 * slot's status word once the last slot is released. */
typedef struct kvstash_board kvstash_board;
typedef struct kvstash_board_signal {
  uint32_t slot;     /* first slot */
  uint32_t count;    /* retrieve: layer ranges; store: 2 (gate, reusable) */
  uint32_t sequence; /* the value that releases the slots */
} kvstash_board_signal;

/* A board's limits: slots per board, and layer ranges per retrieve (at
 * most one per layer). The functions return the same, for bindings that do
 * not read macros. */
#define KVSTASH_MAX_BOARD_SLOTS 4096u
#define KVSTASH_MAX_LAYER_RANGES 256u
KVSTASH_API uint32_t kvstash_max_board_slots(void);
KVSTASH_API uint32_t kvstash_max_layer_ranges(void);
/* The first layer of layer range k (0 <= k <= ranges) when a retrieve over
 * the registration's num_layers layers (in registration order) signals
 * `ranges` ranges: range k holds layers [begin(k), begin(k + 1)), and
 * begin(ranges) = num_layers. 0 when ranges is 0 or k > ranges. */
KVSTASH_API uint32_t kvstash_layer_range_begin(uint32_t num_layers, uint32_t ranges, uint32_t k);

/* slots: 1 to KVSTASH_MAX_BOARD_SLOTS. gpu >= 0 maps the board for that GPU's streams
 * (KVSTASH_UNAVAILABLE without CUDA or stream memory operations); gpu < 0:
 * CPU only. client: where kvstash_last_error records why (may be NULL). */
KVSTASH_API kvstash_status kvstash_board_create(kvstash_client* client, uint32_t slots, int gpu,
                                                kvstash_board** board);
KVSTASH_API void kvstash_board_destroy(kvstash_board* board);
/* Retrieve: returns once the request is queued; with layer_ranges = 1 and
 * a stream, the stream already waits for the data. layer_ranges: 1 to
 * KVSTASH_MAX_LAYER_RANGES and at most the registration's layers; range k
 * covers the layers that kvstash_layer_range_begin says. */
KVSTASH_API kvstash_status kvstash_retrieve_on_stream(
    kvstash_client* client, uint64_t registration_id, const kvstash_chunk* chunks,
    size_t num_chunks, uint32_t skip_tokens, uint64_t lease_id, kvstash_board* board, void* stream,
    uint32_t layer_ranges, uint64_t user_data, kvstash_board_signal* signal, kvstash_call** call);
/* Store: the daemon's gather waits until `stream` gets past this point. A
 * NULL stream leaves the gate to kvstash_board_release(board, slot, ...). */
KVSTASH_API kvstash_status kvstash_store_on_stream(kvstash_client* client, uint64_t registration_id,
                                                   const kvstash_chunk* chunks, size_t num_chunks,
                                                   kvstash_board* board, void* stream,
                                                   uint64_t user_data, kvstash_board_signal* signal,
                                                   kvstash_call** call);
/* Makes `stream` wait for slot signal->slot + k (a retrieve's layer range k;
 * a store's k = 1: the blocks may be reused). */
KVSTASH_API kvstash_status kvstash_board_wait(kvstash_client* client, const kvstash_board* board,
                                              void* stream, const kvstash_board_signal* signal,
                                              uint32_t k);
/* CPU view: 1 once slot signal->slot + k is released; its status word. */
KVSTASH_API int kvstash_board_released(const kvstash_board* board,
                                       const kvstash_board_signal* signal, uint32_t k);
KVSTASH_API uint32_t kvstash_board_status(const kvstash_board* board, uint32_t slot);
/* Writes status, then sequence: releases whatever waits on the slot. */
KVSTASH_API void kvstash_board_release(kvstash_board* board, uint32_t slot, uint32_t sequence,
                                       uint32_t status);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVSTASH_KVSTASH_H_ */
