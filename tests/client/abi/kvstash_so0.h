/* kvstash.h as libkvstash.so.0 first shipped it (git: d3c2c67,
 * client/include/kvstash/kvstash.h), kept verbatim below this comment: the
 * header an older engine was compiled against. Its structs have no
 * struct_size; kvstash_options and kvstash_register_options are shorter than
 * the later so.0 ones. One change: a reference to a design note the
 * repository does not hold now names docs/protocol.md. */
/* clang-format off */
/* kvstash C API (libkvstash.so): the client library for engines written in
 * languages other than C++ (Python through ctypes or cffi, Rust, Go).
 *
 * Calls are synchronous: each returns once kvstashd replied, the request
 * timed out, or the connection failed. A handle may be used from several
 * threads at once. Every call returns a kvstash_status (the wire protocol's
 * ErrorCode values); after a failure, kvstash_last_error(client) says why.
 *
 *   kvstash_client* client = NULL;
 *   kvstash_options options = {NULL, 5000, "my-engine"};
 *   if (kvstash_connect(&options, &client) != KVSTASH_OK)
 *     fprintf(stderr, "%s\n", kvstash_last_error(client));
 *   ...
 *   kvstash_close(client);
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

#define KVSTASH_DEFAULT_SOCKET "ipc:///run/kvstash/kvstash.sock"

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
enum { KVSTASH_ALLOCATION_SHM = 0, KVSTASH_ALLOCATION_CUDA_IPC = 1 };

typedef struct kvstash_client kvstash_client;

typedef struct kvstash_options {
  const char* socket;      /* NULL: KVSTASH_DEFAULT_SOCKET */
  uint32_t timeout_ms;     /* per request; 0: 5000 */
  const char* client_name; /* shown in the daemon's logs; may be NULL */
} kvstash_options;

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

/* One shared memory region holding one or more layers. */
typedef struct kvstash_allocation {
  uint32_t kind;           /* KVSTASH_ALLOCATION_* */
  const char* shm_name;    /* SHM: shm_open name, "/kvstash-1234-0" */
  uint64_t size_bytes;     /* both kinds */
  uint8_t ipc_handle[64];  /* CUDA_IPC: cudaIpcMemHandle_t of the allocation base */
  uint8_t gpu_uuid[16];    /* CUDA_IPC */
} kvstash_allocation;

typedef struct kvstash_layer {
  uint32_t allocation;   /* index into kvstash_register_options.allocations */
  uint64_t offset_bytes; /* layer base inside the allocation */
  kvstash_geometry geometry;
} kvstash_layer;

typedef struct kvstash_register_options {
  const char* model;       /* part of the key namespace */
  const char* tenant_salt; /* may be NULL */
  uint32_t tp_rank;
  uint32_t tp_size; /* 0 is taken as 1 */
  const kvstash_allocation* allocations;
  size_t num_allocations;
  const kvstash_layer* layers;
  size_t num_layers;
} kvstash_register_options;

typedef struct kvstash_registration {
  uint64_t id;
  uint32_t chunk_tokens;
  uint32_t block_tokens;
  uint64_t chunk_bytes;
  uint32_t num_groups;
  uint8_t layout_fingerprint[32];
  uint8_t namespace_id[32]; /* seed of the key chain */
} kvstash_registration;

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

typedef struct kvstash_lookup_result {
  uint32_t hit_chunks;
  uint64_t hit_tokens;
  uint64_t lease_id; /* 0 when nothing hit */
  uint32_t lease_expires_ms;
} kvstash_lookup_result;

/* ---- connection ---- */

/* Connects and says Hello. Like sqlite3_open, *client is set even when this
 * fails (NULL only if memory ran out), so that kvstash_last_error can say
 * why; close it with kvstash_close either way. */
KVSTASH_API kvstash_status kvstash_connect(const kvstash_options* options,
                                           kvstash_client** client);
/* Fails requests still pending with KVSTASH_CANCELLED; NULL is ignored. */
KVSTASH_API void kvstash_close(kvstash_client* client);
/* The message of the calling thread's last call on this handle ("" after a
 * success). Valid until that thread's next call on the handle. */
KVSTASH_API const char* kvstash_last_error(kvstash_client* client);
/* "OutOfRange" for KVSTASH_OUT_OF_RANGE. */
KVSTASH_API const char* kvstash_status_name(kvstash_status status);
KVSTASH_API kvstash_status kvstash_ping(kvstash_client* client, uint64_t* uptime_ms);

/* ---- registration ---- */

KVSTASH_API kvstash_status kvstash_register(kvstash_client* client,
                                            const kvstash_register_options* options,
                                            kvstash_registration* registration);
KVSTASH_API kvstash_status kvstash_unregister(kvstash_client* client, uint64_t registration_id);

/* ---- keys (no I/O) ---- */

/* Chunks covering num_tokens tokens: ceil(num_tokens / chunk_tokens). */
KVSTASH_API size_t kvstash_num_chunks(const kvstash_registration* registration,
                                      size_t num_tokens);
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
                                                 size_t block_table_size,
                                                 kvstash_chunk* chunks);

/* ---- data ---- */

/* outcomes has num_chunks entries, filled in request order. */
KVSTASH_API kvstash_status kvstash_store(kvstash_client* client, uint64_t registration_id,
                                         const kvstash_chunk* chunks, size_t num_chunks,
                                         kvstash_chunk_outcome* outcomes);
KVSTASH_API kvstash_status kvstash_retrieve(kvstash_client* client, uint64_t registration_id,
                                            const kvstash_chunk* chunks, size_t num_chunks,
                                            uint32_t skip_tokens, uint64_t lease_id,
                                            kvstash_chunk_outcome* outcomes);
KVSTASH_API kvstash_status kvstash_lookup(kvstash_client* client, uint64_t registration_id,
                                          const kvstash_key* keys, size_t num_keys,
                                          uint32_t lease_ms, kvstash_lookup_result* result);
KVSTASH_API kvstash_status kvstash_release(kvstash_client* client, uint64_t lease_id);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* KVSTASH_KVSTASH_H_ */
/* clang-format on */
