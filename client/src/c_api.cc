// The C API's synchronous calls: a thin layer over kvstash::Client. No
// exception crosses it; every failure becomes a kvstash_status and
// per-thread text. Asynchronous calls live in c_api_async.cc.
#include "kvstash/kvstash.h"
#include "kvstash/runtime/thread_annotations.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "c_api_internal.h"
#include "c_api_versioned.h"
#include "kvstash/client.h"
#include "kvstash/cuda_memory.h"
#include "kvstash/endpoint.h"

namespace kvstash::capi {

using kvstash::Status;
using kvstash::StatusCode;

#define KVSTASH_SAME(c_value, cpp_value) static_assert(int(c_value) == int(cpp_value), #c_value)
KVSTASH_SAME(KVSTASH_OK, StatusCode::kOk);
KVSTASH_SAME(KVSTASH_INVALID_ARGUMENT, StatusCode::kInvalidArgument);
KVSTASH_SAME(KVSTASH_MALFORMED_MESSAGE, StatusCode::kMalformedMessage);
KVSTASH_SAME(KVSTASH_UNSUPPORTED_VERSION, StatusCode::kUnsupportedVersion);
KVSTASH_SAME(KVSTASH_NOT_FOUND, StatusCode::kNotFound);
KVSTASH_SAME(KVSTASH_OUT_OF_RANGE, StatusCode::kOutOfRange);
KVSTASH_SAME(KVSTASH_TOO_LARGE, StatusCode::kTooLarge);
KVSTASH_SAME(KVSTASH_RESOURCE_EXHAUSTED, StatusCode::kResourceExhausted);
KVSTASH_SAME(KVSTASH_UNAVAILABLE, StatusCode::kUnavailable);
KVSTASH_SAME(KVSTASH_DEVICE_ERROR, StatusCode::kDeviceError);
KVSTASH_SAME(KVSTASH_TIMED_OUT, StatusCode::kTimedOut);
KVSTASH_SAME(KVSTASH_INTERNAL, StatusCode::kInternal);
KVSTASH_SAME(KVSTASH_CANCELLED, StatusCode::kCancelled);
KVSTASH_SAME(KVSTASH_DTYPE_U8, kvstash::DType::kU8);
KVSTASH_SAME(KVSTASH_DTYPE_I8, kvstash::DType::kI8);
KVSTASH_SAME(KVSTASH_DTYPE_F8E4M3, kvstash::DType::kF8E4M3);
KVSTASH_SAME(KVSTASH_DTYPE_F8E5M2, kvstash::DType::kF8E5M2);
KVSTASH_SAME(KVSTASH_DTYPE_F16, kvstash::DType::kF16);
KVSTASH_SAME(KVSTASH_DTYPE_BF16, kvstash::DType::kBF16);
KVSTASH_SAME(KVSTASH_DTYPE_F32, kvstash::DType::kF32);
KVSTASH_SAME(KVSTASH_CHUNK_STORED, kvstash::ChunkResult::kStored);
KVSTASH_SAME(KVSTASH_CHUNK_ALREADY_PRESENT, kvstash::ChunkResult::kAlreadyPresent);
KVSTASH_SAME(KVSTASH_CHUNK_SKIPPED_NO_ROOM, kvstash::ChunkResult::kSkippedNoRoom);
KVSTASH_SAME(KVSTASH_CHUNK_RETRIEVED, kvstash::ChunkResult::kRetrieved);
KVSTASH_SAME(KVSTASH_CHUNK_MISSING, kvstash::ChunkResult::kMissing);
KVSTASH_SAME(KVSTASH_CHUNK_FAILED, kvstash::ChunkResult::kFailed);
#undef KVSTASH_SAME
// Each enum's last C value is its count less one: a value added to the
// schema fails here until kvstash.h has it.
static_assert(kvstash::kStatusCodeCount == KVSTASH_CANCELLED + 1, "kvstash_status lacks a code");
static_assert(kvstash::kDTypeCount == KVSTASH_DTYPE_F32 + 1, "KVSTASH_DTYPE_* lacks a type");
static_assert(kvstash::kChunkResultCount == KVSTASH_CHUNK_FAILED + 1,
              "KVSTASH_CHUNK_* lacks a result");

#ifdef KVSTASH_SOVERSION
static_assert(KVSTASH_SOVERSION == KVSTASH_ABI_VERSION,
              "libkvstash's soname and kvstash.h's KVSTASH_ABI_VERSION differ");
#endif

constexpr bool SameText(const char* a, const char* b) {
  return *a == *b && (*a == '\0' || SameText(a + 1, b + 1));
}
static_assert(SameText(KVSTASH_DEFAULT_SOCKET, kvstash::kDefaultSocket),
              "KVSTASH_DEFAULT_SOCKET differs from kDefaultSocket");

kvstash::ChunkKey ToKey(const kvstash_key& key) {
  kvstash::ChunkKey out;
  std::memcpy(out.data(), key.bytes, out.size());
  return out;
}

kvstash::LayerGeometry ToGeometry(const kvstash_geometry& g) {
  kvstash::LayerGeometry out;
  out.num_blocks = g.num_blocks;
  out.kv_count = g.kv_count;
  out.block_tokens = g.block_tokens;
  out.num_heads = g.num_heads;
  out.head_bytes = g.head_bytes;
  out.block_stride = g.block_stride;
  out.kv_stride = g.kv_stride;
  out.token_stride = g.token_stride;
  out.head_stride = g.head_stride;
  out.dtype = kvstash::DType(g.dtype);
  return out;
}

kvstash::Result<kvstash::Allocation> ToAllocation(const kvstash_allocation& a, size_t index) {
  if (a.kind == KVSTASH_ALLOCATION_SHM) {
    if (a.shm_name == nullptr) {
      return Status::InvalidArgument("allocation " + std::to_string(index) + " has no shm_name");
    }
    return kvstash::Allocation(kvstash::HostShm{a.shm_name, a.size_bytes});
  }
  if (a.kind == KVSTASH_ALLOCATION_PEER_FD) {
    if (a.fd < 0) {
      return Status::InvalidArgument("allocation " + std::to_string(index) + " names descriptor " +
                                     std::to_string(a.fd) + "; descriptors are >= 0");
    }
    return kvstash::Allocation(kvstash::PeerFd{a.fd, a.size_bytes});
  }
  if (a.kind == KVSTASH_ALLOCATION_CUDA_IPC) {
    kvstash::CudaIpc cuda;
    std::memcpy(cuda.ipc_handle.data(), a.ipc_handle, cuda.ipc_handle.size());
    std::memcpy(cuda.gpu_uuid.data(), a.gpu_uuid, cuda.gpu_uuid.size());
    cuda.size_bytes = a.size_bytes;
    return kvstash::Allocation(cuda);
  }
  return Status::InvalidArgument("allocation " + std::to_string(index) + " has unknown kind " +
                                 std::to_string(a.kind));
}

kvstash::ChunkList ChunksOf(const kvstash_chunk* chunks, size_t num_chunks) {
  return kvstash::ChunkList(chunks, num_chunks, [](const void* table, size_t i) {
    const kvstash_chunk& c = static_cast<const kvstash_chunk*>(table)[i];
    return kvstash::ChunkRef{c.key.bytes, c.num_tokens, c.block_ids, c.num_block_ids};
  });
}

void ToOutcomes(const std::vector<kvstash::ChunkOutcome>& in, kvstash_chunk_outcome* out) {
  for (size_t i = 0; i < in.size(); ++i) {
    out[i].result = uint8_t(in[i].result);
    out[i].num_tokens = in[i].num_tokens;
    out[i].error = ToC(in[i].error.code());
  }
}

kvstash::RegisteredKv FromC(const kvstash_registration& r) {
  kvstash::RegisteredKv out;
  out.id = r.id;
  out.chunk_tokens = r.chunk_tokens;
  out.block_tokens = r.block_tokens;
  out.chunk_bytes = r.chunk_bytes;
  std::memcpy(out.namespace_id.data(), r.namespace_id, out.namespace_id.size());
  std::memcpy(out.layout_fingerprint.data(), r.layout_fingerprint, out.layout_fingerprint.size());
  return out;
}

kvstash_lookup_result ToC(const LookupResult& result) {
  kvstash_lookup_result out = KVSTASH_LOOKUP_RESULT_INIT;
  out.hit_chunks = result.hit_chunks;
  out.hit_tokens = result.hit_tokens;
  out.lease_id = result.lease_id;
  out.lease_expires_ms = result.lease_expires_ms;
  out.l1_chunks = result.CountIn(TierLevel::kL1);
  out.l2_chunks = result.CountIn(TierLevel::kL2);
  out.l3_chunks = result.CountIn(TierLevel::kL3);
  out.prefetch_pending = result.prefetch_pending;
  out.lease_truncated = result.lease_truncated ? 1u : 0u;
  return out;
}

namespace {

// The C++ registration options a kvstash_register_options describes.
Result<RegisterOptions> ToRegisterOptions(const kvstash_register_options& options) {
  if (options.model == nullptr || options.model[0] == '\0') {
    return Status::InvalidArgument("kvstash_register_options.model is required (got none)");
  }
  const bool by_hand = options.num_allocations > 0 || options.num_layers > 0;
  if (by_hand && options.num_cuda_layers > 0) {
    return Status::InvalidArgument(
        "kvstash_register_options gives both allocations/layers (" +
        std::to_string(options.num_layers) + " layers) and cuda_layers (" +
        std::to_string(options.num_cuda_layers) + "); give one or the other");
  }
  if ((options.num_allocations > 0 && options.allocations == nullptr) ||
      (options.num_layers > 0 && options.layers == nullptr) ||
      (options.num_cuda_layers > 0 && options.cuda_layers == nullptr)) {
    return Status::InvalidArgument("kvstash_register_options has a count without its array");
  }
  RegisterOptions cpp;
  cpp.model = options.model;
  cpp.tenant_salt = options.tenant_salt ? options.tenant_salt : "";
  cpp.tp_rank = options.tp_rank;
  cpp.tp_size = options.tp_size == 0 ? 1 : options.tp_size;
  cpp.replicated_across_ranks = options.replicated_across_ranks != 0;
  for (size_t i = 0; i < options.num_allocations; ++i) {
    auto allocation = ToAllocation(options.allocations[i], i);
    if (!allocation.ok()) return allocation.status();
    cpp.allocations.push_back(std::move(allocation.value()));
  }
  for (size_t i = 0; i < options.num_layers; ++i) {
    const kvstash_layer& layer = options.layers[i];
    cpp.layers.push_back({layer.allocation, layer.offset_bytes, ToGeometry(layer.geometry)});
  }
  if (options.num_cuda_layers > 0) {
    std::vector<CudaLayer> layers;
    layers.reserve(options.num_cuda_layers);
    for (size_t i = 0; i < options.num_cuda_layers; ++i) {
      layers.push_back({options.cuda_layers[i].data, ToGeometry(options.cuda_layers[i].geometry)});
    }
    KVSTASH_RETURN_IF_ERROR(AddCudaLayers(layers, cpp));
  }
  if (options.board != nullptr) cpp.board = kvstash::capi::BoardShm(options.board);
  return cpp;
}

void CopyString(const std::string& from, char* to, size_t capacity) {
  const size_t n = std::min(from.size(), capacity - 1);
  std::memcpy(to, from.data(), n);
  to[n] = '\0';
}

// A registration kvstash_register filled (its struct_size one of ours).
bool Valid(const kvstash_registration* registration) {
  return registration != nullptr &&
         CheckStructSize<kvstash_registration>(registration->struct_size).ok();
}

// The chained keys of tokens that follow the chunk keyed *previous in a
// prompt, or begin it (previous NULL: the registration's namespace).
std::vector<ChunkKey> ChainFrom(const kvstash_registration& registration,
                                const kvstash_key* previous, const int32_t* tokens,
                                size_t num_tokens) {
  const ChunkKey seed = previous != nullptr ? ToKey(*previous) : FromC(registration).namespace_id;
  return ChainChunkKeys(seed, tokens, num_tokens, registration.chunk_tokens);
}

// A malloc'ed copy of text for the caller to kvstash_free.
Status ToMalloced(const std::string& text, char** out) {
  char* buffer = static_cast<char*>(std::malloc(text.size() + 1));
  if (buffer == nullptr) {
    return Status(StatusCode::kResourceExhausted,
                  "out of memory for " + std::to_string(text.size() + 1) + " bytes of JSON");
  }
  std::memcpy(buffer, text.data(), text.size());
  buffer[text.size()] = '\0';
  *out = buffer;
  return Status::Ok();
}

}  // namespace
}  // namespace kvstash::capi

using kvstash::Status;
using kvstash::StatusCode;
using namespace kvstash::capi;  // NOLINT: the C entry points below use its helpers

extern "C" {

uint32_t kvstash_abi_version(void) { return KVSTASH_ABI_VERSION; }

kvstash_status kvstash_connect(const kvstash_options* options, kvstash_client** client) {
  if (client == nullptr) return KVSTASH_INVALID_ARGUMENT;
  *client = nullptr;
  kvstash_client* handle = new (std::nothrow) kvstash_client();
  if (handle == nullptr) return KVSTASH_RESOURCE_EXHAUSTED;
  *client = handle;
  try {
    Status queue_error;
    handle->completions = NewCompletionQueue(queue_error);
    if (!handle->completions) {
      handle->connect_error = queue_error;
      return handle->Finish(queue_error);
    }
    // NULL: every default. An engine of an older kvstash.h is refused here,
    // before anything past what it gave is read.
    kvstash_options given = KVSTASH_OPTIONS_INIT;
    if (options != nullptr) {
      kvstash::Result<kvstash_options> read = ReadVersioned(*options);
      if (!read.ok()) {
        handle->connect_error = read.status();
        return handle->Finish(read.status());
      }
      given = *read;
    }
    kvstash::ClientOptions cpp;
    if (given.socket != nullptr) cpp.socket = given.socket;
    if (given.timeout_ms != 0) cpp.request_timeout = std::chrono::milliseconds(given.timeout_ms);
    if (given.client_name != nullptr) cpp.client_name = given.client_name;
    if (given.busy_poll_us != 0) {
      cpp.busy_poll_us = given.busy_poll_us == KVSTASH_NEVER_SPIN ? 0 : given.busy_poll_us;
    }
    auto connected = kvstash::Client::Connect(std::move(cpp));
    if (!connected.ok()) {
      handle->connect_error = connected.status();
      return handle->Finish(connected.status());
    }
    handle->client = std::move(connected.value());
    return handle->Finish(Status::Ok());
  } catch (const std::exception& e) {
    handle->connect_error = Status::Internal(std::string("unexpected exception: ") + e.what());
    return handle->Finish(handle->connect_error);
  }
}

void kvstash_close(kvstash_client* client) { delete client; }

const char* kvstash_last_error(kvstash_client* client) {
  if (client == nullptr) return "kvstash_client is NULL";
  kvstash::MutexLock lock(client->mutex);
  // Node-based map: the string stays put while other threads add theirs.
  return client->errors[std::this_thread::get_id()].c_str();
}

const char* kvstash_status_name(kvstash_status status) {
  return kvstash::NameOf(StatusCode(uint16_t(status)));
}

kvstash_status kvstash_ping(kvstash_client* client, uint64_t* uptime_ms) {
  return Call(client, [&](kvstash::Client& c) {
    auto uptime = c.Ping().get();
    if (uptime.ok() && uptime_ms != nullptr) *uptime_ms = *uptime;
    return uptime.ok() ? Status::Ok() : uptime.status();
  });
}

kvstash_status kvstash_get_server_info(kvstash_client* client, kvstash_server_info* info) {
  return Call(client, [&](kvstash::Client& c) {
    if (info == nullptr) return Status::InvalidArgument("kvstash_get_server_info needs an output");
    KVSTASH_RETURN_IF_ERROR(CheckStructSize<kvstash_server_info>(info->struct_size));
    const kvstash::ServerInfo server = c.server_info();
    kvstash_server_info out = KVSTASH_SERVER_INFO_INIT;
    out.protocol_version = server.protocol_version;
    CopyString(server.server_version, out.server_version, sizeof(out.server_version));
    std::memcpy(out.boot_id, server.boot_id.data(), sizeof(out.boot_id));
    out.chunk_tokens = server.chunk_tokens;
    out.max_chunks_per_request = server.max_chunks_per_request;
    out.max_message_bytes = server.max_message_bytes;
    CopyString(server.backend, out.backend, sizeof(out.backend));
    out.peer_timeout_ms = server.peer_timeout_ms;
    out.restarts = server.restarts;
    WriteVersioned(out, info);
    return Status::Ok();
  });
}

kvstash_status kvstash_describe(kvstash_client* client, char** json) {
  return Call(client, [&](kvstash::Client& c) {
    if (json == nullptr) return Status::InvalidArgument("kvstash_describe needs an output");
    *json = nullptr;
    auto described = c.Describe().get();
    if (!described.ok()) return described.status();
    return ToMalloced(*described, json);
  });
}

kvstash_status kvstash_stats(kvstash_client* client, char** json) {
  return Call(client, [&](kvstash::Client& c) {
    if (json == nullptr) return Status::InvalidArgument("kvstash_stats needs an output");
    *json = nullptr;
    auto stats = c.Stats().get();
    if (!stats.ok()) return stats.status();
    return ToMalloced(stats->json, json);
  });
}

void kvstash_free(void* buffer) { std::free(buffer); }

kvstash_status kvstash_clear(kvstash_client* client, const char* model, const char* tenant_salt,
                             uint64_t* cleared) {
  return Call(client, [&](kvstash::Client& c) {
    auto dropped = c.Clear(model ? model : "", tenant_salt ? tenant_salt : "").get();
    if (!dropped.ok()) return dropped.status();
    if (cleared != nullptr) *cleared = *dropped;
    return Status::Ok();
  });
}

kvstash_status kvstash_pool_ready(kvstash_client* client, uint64_t* ready_bytes,
                                  uint64_t* capacity_bytes) {
  return Call(client, [&](kvstash::Client& c) {
    auto readiness = c.PoolReady().get();
    if (!readiness.ok()) return readiness.status();
    if (ready_bytes != nullptr) *ready_bytes = readiness->ready_bytes;
    if (capacity_bytes != nullptr) *capacity_bytes = readiness->capacity_bytes;
    return Status::Ok();
  });
}

kvstash_status kvstash_register(kvstash_client* client, const kvstash_register_options* options,
                                kvstash_registration* registration) {
  return Call(client, [&](kvstash::Client& c) {
    if (options == nullptr || registration == nullptr) {
      return Status::InvalidArgument("kvstash_register needs options and an output");
    }
    kvstash::Result<kvstash_register_options> given = ReadVersioned(*options);
    if (!given.ok()) return given.status();
    KVSTASH_RETURN_IF_ERROR(CheckStructSize<kvstash_registration>(registration->struct_size));
    auto cpp = ToRegisterOptions(*given);
    if (!cpp.ok()) return cpp.status();
    auto reg = c.RegisterKV(*cpp).get();
    if (!reg.ok()) return reg.status();
    kvstash_registration out = KVSTASH_REGISTRATION_INIT;
    out.id = reg->id;
    out.chunk_tokens = reg->chunk_tokens;
    out.block_tokens = reg->block_tokens;
    out.chunk_bytes = reg->chunk_bytes;
    out.num_groups = uint32_t(reg->groups.size());
    std::memcpy(out.layout_fingerprint, reg->layout_fingerprint.data(), 32);
    std::memcpy(out.namespace_id, reg->namespace_id.data(), 32);
    WriteVersioned(out, registration);
    return Status::Ok();
  });
}

kvstash_status kvstash_unregister(kvstash_client* client, uint64_t registration_id) {
  return Call(client, [&](kvstash::Client& c) { return c.UnregisterKV(registration_id).get(); });
}

size_t kvstash_num_chunks(const kvstash_registration* registration, size_t num_tokens) {
  if (!Valid(registration) || registration->chunk_tokens == 0) return 0;
  return (num_tokens + registration->chunk_tokens - 1) / registration->chunk_tokens;
}

kvstash_status kvstash_chunk_keys(const kvstash_registration* registration, const int32_t* tokens,
                                  size_t num_tokens, kvstash_key* keys) {
  return kvstash_chunk_keys_after(registration, nullptr, tokens, num_tokens, keys);
}

kvstash_status kvstash_chunk_keys_after(const kvstash_registration* registration,
                                        const kvstash_key* previous, const int32_t* tokens,
                                        size_t num_tokens, kvstash_key* keys) {
  if (!Valid(registration) || (num_tokens > 0 && (tokens == nullptr || keys == nullptr))) {
    return KVSTASH_INVALID_ARGUMENT;
  }
  try {
    const auto computed = ChainFrom(*registration, previous, tokens, num_tokens);
    for (size_t i = 0; i < computed.size(); ++i) {
      std::memcpy(keys[i].bytes, computed[i].data(), computed[i].size());
    }
    return KVSTASH_OK;
  } catch (...) {
    return KVSTASH_INTERNAL;
  }
}

kvstash_status kvstash_prompt_chunks(const kvstash_registration* registration,
                                     const int32_t* tokens, size_t num_tokens,
                                     const uint32_t* block_table, size_t block_table_size,
                                     kvstash_chunk* chunks) {
  return kvstash_prompt_chunks_after(registration, nullptr, tokens, num_tokens, block_table,
                                     block_table_size, chunks);
}

kvstash_status kvstash_prompt_chunks_after(const kvstash_registration* registration,
                                           const kvstash_key* previous, const int32_t* tokens,
                                           size_t num_tokens, const uint32_t* block_table,
                                           size_t block_table_size, kvstash_chunk* chunks) {
  if (!Valid(registration) || registration->chunk_tokens == 0 || registration->block_tokens == 0 ||
      registration->chunk_tokens % registration->block_tokens ||
      (num_tokens > 0 && (tokens == nullptr || block_table == nullptr || chunks == nullptr))) {
    return KVSTASH_INVALID_ARGUMENT;
  }
  const size_t block_tokens = registration->block_tokens;
  if (block_table_size < (num_tokens + block_tokens - 1) / block_tokens) {
    return KVSTASH_INVALID_ARGUMENT;
  }
  try {
    const auto keys = ChainFrom(*registration, previous, tokens, num_tokens);
    for (size_t i = 0; i < keys.size(); ++i) {
      const size_t first_token = i * registration->chunk_tokens;
      const size_t len = std::min<size_t>(registration->chunk_tokens, num_tokens - first_token);
      std::memcpy(chunks[i].key.bytes, keys[i].data(), keys[i].size());
      chunks[i].num_tokens = uint32_t(len);
      chunks[i].block_ids = block_table + first_token / block_tokens;
      chunks[i].num_block_ids = uint32_t((len + block_tokens - 1) / block_tokens);
    }
    return KVSTASH_OK;
  } catch (...) {
    return KVSTASH_INTERNAL;
  }
}

kvstash_status kvstash_store(kvstash_client* client, uint64_t registration_id,
                             const kvstash_chunk* chunks, size_t num_chunks,
                             kvstash_chunk_outcome* outcomes) {
  return Call(client, [&](kvstash::Client& c) {
    if (num_chunks > 0 && (chunks == nullptr || outcomes == nullptr)) {
      return Status::InvalidArgument("kvstash_store needs chunks and outcomes");
    }
    auto stored = c.Store(registration_id, ChunksOf(chunks, num_chunks)).get();
    if (!stored.ok()) return stored.status();
    ToOutcomes(*stored, outcomes);
    return Status::Ok();
  });
}

kvstash_status kvstash_retrieve(kvstash_client* client, uint64_t registration_id,
                                const kvstash_chunk* chunks, size_t num_chunks,
                                uint32_t skip_tokens, uint64_t lease_id,
                                kvstash_chunk_outcome* outcomes) {
  return Call(client, [&](kvstash::Client& c) {
    if (num_chunks > 0 && (chunks == nullptr || outcomes == nullptr)) {
      return Status::InvalidArgument("kvstash_retrieve needs chunks and outcomes");
    }
    auto retrieved =
        c.Retrieve(registration_id, ChunksOf(chunks, num_chunks), skip_tokens, lease_id).get();
    if (!retrieved.ok()) return retrieved.status();
    ToOutcomes(*retrieved, outcomes);
    return Status::Ok();
  });
}

kvstash_status kvstash_lookup_ex(kvstash_client* client, uint64_t registration_id,
                                 const kvstash_key* keys, size_t num_keys, uint32_t lease_ms,
                                 uint32_t flags, kvstash_lookup_result* result) {
  return Call(client, [&](kvstash::Client& c) {
    if (result == nullptr || (num_keys > 0 && keys == nullptr)) {
      return Status::InvalidArgument("kvstash_lookup_ex needs keys and a result");
    }
    KVSTASH_RETURN_IF_ERROR(CheckStructSize<kvstash_lookup_result>(result->struct_size));
    std::vector<kvstash::ChunkKey> cpp_keys;
    cpp_keys.reserve(num_keys);
    for (size_t i = 0; i < num_keys; ++i) cpp_keys.push_back(ToKey(keys[i]));
    auto found =
        c.Lookup(registration_id, cpp_keys, lease_ms, (flags & KVSTASH_LOOKUP_PREFETCH) != 0).get();
    if (!found.ok()) return found.status();
    WriteVersioned(ToC(*found), result);
    return Status::Ok();
  });
}

kvstash_status kvstash_release(kvstash_client* client, uint64_t lease_id) {
  return Call(client, [&](kvstash::Client& c) {
    auto released = c.Release(lease_id).get();
    return released.ok() ? Status::Ok() : released.status();
  });
}

}  // extern "C"
