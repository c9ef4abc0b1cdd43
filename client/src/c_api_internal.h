// What the C API's files share: the handle behind kvstash_client, value
// conversions between the C structs and the C++ types, and the guard that
// keeps exceptions from crossing the C boundary.
#pragma once

#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "kvstash/client.h"
#include "kvstash/kvstash.h"
#include "kvstash/runtime/thread_annotations.h"

namespace kvstash::capi {

class CompletionQueue;

inline kvstash_status ToC(StatusCode code) { return kvstash_status(int(code)); }
ChunkKey ToKey(const kvstash_key& key);
// The C table read in place (ChunkList): block ids are not copied; the table
// must stay valid until the call that takes the list returns.
ChunkList ChunksOf(const kvstash_chunk* chunks, size_t num_chunks);
void ToOutcomes(const std::vector<ChunkOutcome>& in, kvstash_chunk_outcome* out);
kvstash_lookup_result ToC(const LookupResult& result);
// The shared memory of a kvstash_board (c_api_board.cc).
HostShm BoardShm(const kvstash_board* board);

}  // namespace kvstash::capi

struct kvstash_board {
  std::unique_ptr<kvstash::CompletionBoard> board;
};

struct kvstash_client {
  // Shared with every kvstash_call, which may outlive the handle.
  std::shared_ptr<kvstash::capi::CompletionQueue> completions;
  std::unique_ptr<kvstash::Client> client;
  kvstash::Status connect_error;  // why client is null

  kvstash::Mutex mutex;
  std::unordered_map<std::thread::id, std::string> errors KVSTASH_GUARDED_BY(mutex);

  // Records the outcome of a call for kvstash_last_error and returns its code.
  kvstash_status Finish(const kvstash::Status& status) {
    kvstash::MutexLock lock(mutex);
    errors[std::this_thread::get_id()] = status.ok() ? std::string() : status.ToString();
    return kvstash::capi::ToC(status.code());
  }
};

namespace kvstash::capi {

// Runs body(client) on a connected handle, turning any exception into
// KVSTASH_INTERNAL; body returns a Status.
template <typename Body>
kvstash_status Call(kvstash_client* handle, Body body) {
  if (handle == nullptr) return KVSTASH_INVALID_ARGUMENT;
  try {
    if (!handle->client) {
      return handle->Finish(
          Status::Unavailable("not connected: " + handle->connect_error.ToString()));
    }
    return handle->Finish(body(*handle->client));
  } catch (const std::exception& e) {
    return handle->Finish(Status::Internal(std::string("unexpected exception: ") + e.what()));
  } catch (...) {
    return handle->Finish(Status::Internal("unexpected exception"));
  }
}

// Creates the completion queue of a new handle (an eventfd); null on failure.
std::shared_ptr<CompletionQueue> NewCompletionQueue(Status& why);

}  // namespace kvstash::capi
