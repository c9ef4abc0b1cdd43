// The C API's asynchronous calls. A kvstash_call is completed by a callback
// on the client's I/O thread (kvstash::Client's Done form), so no thread is
// held per call. Completed calls wait in the client's CompletionQueue, whose
// eventfd is readable while it holds any, until kvstash_take_completed.
//
// Lifetime: a call is referenced by its owner (until kvstash_call_free) and
// by its request (until the completion ran); the last reference deletes it.
// The queue is shared by the handle and every call, since either may go
// first.
#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <map>
#include <mutex>

#include "c_api_internal.h"
#include "c_api_versioned.h"
#include "kvstash/runtime/adaptive_spin.h"
#include "kvstash/runtime/thread_annotations.h"

struct kvstash_call {
  std::shared_ptr<kvstash::capi::CompletionQueue> queue;
  uint64_t user_data = 0;
  std::atomic<int> references{2};  // the owner and the request in flight

  kvstash::Mutex mutex;
  std::condition_variable completed;
  std::atomic<bool> done{false};  // set once, under mutex, after the results

  // Written once by the completion, before `done`; read after it.
  kvstash_status status = KVSTASH_UNAVAILABLE;
  std::string error = "the call is still in flight";
  std::vector<kvstash_chunk_outcome> outcomes;
  size_t num_chunks = 0;
  kvstash_lookup_result lookup = KVSTASH_LOOKUP_RESULT_INIT;

  // CompletionQueue state, under the queue's mutex (another object's: not
  // expressible as an annotation).
  bool freed = false;
  bool queued = false;
  uint64_t sequence = 0;
};

namespace kvstash::capi {

class CompletionQueue {
 public:
  explicit CompletionQueue(int fd) : fd_(fd) {}
  ~CompletionQueue() { ::close(fd_); }
  CompletionQueue(const CompletionQueue&) = delete;
  CompletionQueue& operator=(const CompletionQueue&) = delete;

  int fd() const { return fd_; }

  // The I/O thread, once per call: marks it done and queues it unless its
  // owner freed it, both under the queue's lock, so that a call seen done
  // (kvstash_call_wait) is already takeable and a taken one is done.
  void Completed(kvstash_call* call) {
    kvstash::MutexLock lock(mutex_);
    {
      kvstash::MutexLock call_lock(call->mutex);
      call->done.store(true, std::memory_order_release);
    }
    if (call->freed) return;
    call->queued = true;
    call->sequence = next_sequence_++;
    completed_.emplace(call->sequence, call);
    if (completed_.size() == 1) Signal();
  }

  size_t Take(kvstash_call** calls, size_t max) {
    kvstash::MutexLock lock(mutex_);
    size_t n = 0;
    while (n < max && !completed_.empty()) {
      kvstash_call* call = completed_.begin()->second;
      completed_.erase(completed_.begin());
      call->queued = false;
      calls[n++] = call;
    }
    if (completed_.empty()) Clear();
    return n;
  }

  // kvstash_call_free: never hand this call out again.
  void Forget(kvstash_call* call) {
    kvstash::MutexLock lock(mutex_);
    call->freed = true;
    if (call->queued) {
      completed_.erase(call->sequence);
      call->queued = false;
      if (completed_.empty()) Clear();
    }
  }

 private:
  void Signal() {
    const uint64_t one = 1;
    // Cannot fail short of a full counter (2^64 - 2), which Clear prevents.
    [[maybe_unused]] ssize_t written = ::write(fd_, &one, sizeof(one));
  }
  void Clear() {
    uint64_t value = 0;
    [[maybe_unused]] ssize_t read = ::read(fd_, &value, sizeof(value));  // EAGAIN when 0
  }

  const int fd_;
  kvstash::Mutex mutex_;
  std::map<uint64_t, kvstash_call*> completed_ KVSTASH_GUARDED_BY(mutex_);  // by completion order
  uint64_t next_sequence_ KVSTASH_GUARDED_BY(mutex_) = 1;
};

std::shared_ptr<CompletionQueue> NewCompletionQueue(Status& why) {
  const int fd = ::eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) {
    why = Status::Unavailable(std::string("eventfd failed: ") + std::strerror(errno));
    return nullptr;
  }
  return std::make_shared<CompletionQueue>(fd);
}

namespace {

void Unreference(kvstash_call* call) {
  if (call->references.fetch_sub(1, std::memory_order_acq_rel) == 1) delete call;
}

// Publishes a call's outcome: wakes its waiters and queues it.
void Complete(kvstash_call* call, const Status& status) {
  call->status = ToC(status.code());
  call->error = status.ok() ? std::string() : status.ToString();
  call->queue->Completed(call);
  call->completed.notify_all();
  Unreference(call);
}

// The completion of a store or retrieve.
Client::Done<Result<std::vector<ChunkOutcome>>> OutcomesDone(kvstash_call* call) {
  return [call](Result<std::vector<ChunkOutcome>> result) {
    if (result.ok()) {
      call->outcomes.resize(result->size());
      ToOutcomes(*result, call->outcomes.data());
    }
    Complete(call, result.status());
  };
}

// Starts an asynchronous call: checks the handle, makes the call, and runs
// submit(client, call), which must arrange exactly one Complete.
template <typename Submit>
kvstash_status Start(kvstash_client* handle, uint64_t user_data, kvstash_call** out,
                     Submit submit) {
  if (out == nullptr) {
    return handle ? handle->Finish(Status::InvalidArgument("the kvstash_call** is NULL"))
                  : KVSTASH_INVALID_ARGUMENT;
  }
  *out = nullptr;
  return Call(handle, [&](Client& client) {
    auto* call = new kvstash_call();
    call->queue = handle->completions;
    call->user_data = user_data;
    *out = call;
    submit(client, call);
    return Status::Ok();
  });
}

}  // namespace
}  // namespace kvstash::capi

using kvstash::Status;
using namespace kvstash::capi;  // NOLINT: the C entry points below use its helpers

extern "C" {

kvstash_status kvstash_store_submit(kvstash_client* client, uint64_t registration_id,
                                    const kvstash_chunk* chunks, size_t num_chunks,
                                    uint64_t user_data, kvstash_call** call) {
  if (client != nullptr && num_chunks > 0 && chunks == nullptr) {
    return client->Finish(Status::InvalidArgument("kvstash_store_submit: chunks is NULL"));
  }
  return Start(client, user_data, call, [&](kvstash::Client& c, kvstash_call* pending) {
    pending->num_chunks = num_chunks;
    c.Store(registration_id, ChunksOf(chunks, num_chunks), OutcomesDone(pending));
  });
}

kvstash_status kvstash_retrieve_submit(kvstash_client* client, uint64_t registration_id,
                                       const kvstash_chunk* chunks, size_t num_chunks,
                                       uint32_t skip_tokens, uint64_t lease_id, uint64_t user_data,
                                       kvstash_call** call) {
  if (client != nullptr && num_chunks > 0 && chunks == nullptr) {
    return client->Finish(Status::InvalidArgument("kvstash_retrieve_submit: chunks is NULL"));
  }
  return Start(client, user_data, call, [&](kvstash::Client& c, kvstash_call* pending) {
    pending->num_chunks = num_chunks;
    c.Retrieve(registration_id, ChunksOf(chunks, num_chunks), skip_tokens, lease_id,
               OutcomesDone(pending));
  });
}

kvstash_status kvstash_lookup_ex_submit(kvstash_client* client, uint64_t registration_id,
                                        const kvstash_key* keys, size_t num_keys, uint32_t lease_ms,
                                        uint32_t flags, uint64_t user_data, kvstash_call** call) {
  if (client != nullptr && num_keys > 0 && keys == nullptr) {
    return client->Finish(Status::InvalidArgument("kvstash_lookup_ex_submit: keys is NULL"));
  }
  return Start(client, user_data, call, [&](kvstash::Client& c, kvstash_call* pending) {
    std::vector<kvstash::ChunkKey> cpp_keys;
    cpp_keys.reserve(num_keys);
    for (size_t i = 0; i < num_keys; ++i) cpp_keys.push_back(ToKey(keys[i]));
    c.Lookup(registration_id, cpp_keys, lease_ms, (flags & KVSTASH_LOOKUP_PREFETCH) != 0,
             [pending](kvstash::Result<kvstash::LookupResult> result) {
               if (result.ok()) pending->lookup = ToC(*result);
               Complete(pending, result.status());
             });
  });
}

kvstash_status kvstash_release_submit(kvstash_client* client, uint64_t lease_id, uint64_t user_data,
                                      kvstash_call** call) {
  return Start(client, user_data, call, [&](kvstash::Client& c, kvstash_call* pending) {
    c.Release(lease_id, [pending](kvstash::Result<uint32_t> result) {
      if (result.ok()) pending->lookup.hit_chunks = *result;
      Complete(pending, result.status());
    });
  });
}

int kvstash_call_done(const kvstash_call* call) {
  return call != nullptr && call->done.load(std::memory_order_acquire) ? 1 : 0;
}

int kvstash_call_wait(kvstash_call* call, uint32_t timeout_ms) {
  if (call == nullptr) return 0;
  auto done = [call] { return call->done.load(std::memory_order_acquire); };
  if (timeout_ms > 0) {
    // A reply that comes within the spin window needs no wake-up of this
    // thread (docs/deployment.md "Spinning").
    const auto until =
        std::chrono::steady_clock::now() + std::chrono::microseconds(kvstash::kDefaultSpinWindowUs);
    while (!done() && std::chrono::steady_clock::now() < until) {
#if defined(__x86_64__)
      __builtin_ia32_pause();
#endif
    }
    if (done()) return 1;
  }
  kvstash::MutexLock lock(call->mutex);
  if (timeout_ms == UINT32_MAX) {
    call->completed.wait(lock.native(), done);
    return 1;
  }
  return call->completed.wait_for(lock.native(), std::chrono::milliseconds(timeout_ms), done) ? 1
                                                                                              : 0;
}

uint64_t kvstash_call_user_data(const kvstash_call* call) {
  return call == nullptr ? 0 : call->user_data;
}

kvstash_status kvstash_call_status(const kvstash_call* call) {
  if (call == nullptr) return KVSTASH_INVALID_ARGUMENT;
  return kvstash_call_done(call) ? call->status : KVSTASH_UNAVAILABLE;
}

const char* kvstash_call_error(const kvstash_call* call) {
  if (call == nullptr) return "kvstash_call is NULL";
  return kvstash_call_done(call) ? call->error.c_str() : "the call is still in flight";
}

size_t kvstash_call_outcomes(const kvstash_call* call, kvstash_chunk_outcome* outcomes,
                             size_t capacity) {
  if (call == nullptr) return 0;
  if (kvstash_call_done(call) && outcomes != nullptr) {
    const size_t n = std::min(capacity, call->outcomes.size());
    std::memcpy(outcomes, call->outcomes.data(), n * sizeof(kvstash_chunk_outcome));
  }
  return call->num_chunks;
}

kvstash_status kvstash_call_lookup_result(const kvstash_call* call, kvstash_lookup_result* result) {
  if (call == nullptr || result == nullptr) return KVSTASH_INVALID_ARGUMENT;
  if (!CheckStructSize<kvstash_lookup_result>(result->struct_size).ok()) {
    return KVSTASH_INVALID_ARGUMENT;
  }
  if (!kvstash_call_done(call)) return KVSTASH_UNAVAILABLE;
  WriteVersioned(call->lookup, result);
  return call->status;
}

void kvstash_call_free(kvstash_call* call) {
  if (call == nullptr) return;
  call->queue->Forget(call);
  Unreference(call);
}

int kvstash_completion_fd(kvstash_client* client) {
  if (client == nullptr || !client->completions) return -1;
  return client->completions->fd();
}

size_t kvstash_take_completed(kvstash_client* client, kvstash_call** calls, size_t max) {
  if (client == nullptr || !client->completions || calls == nullptr) return 0;
  return client->completions->Take(calls, max);
}

}  // extern "C"

// GPU-side completion: as *_submit, with the request's board slots in
// *signal. A request refused before it is sent returns its error and no call.
namespace {

template <typename Send>
kvstash_status StartOnStream(kvstash_client* client, const kvstash_chunk* chunks, size_t num_chunks,
                             kvstash_board* board, kvstash_board_signal* signal, uint64_t user_data,
                             kvstash_call** call, const char* what, Send send) {
  if (client != nullptr &&
      ((num_chunks > 0 && chunks == nullptr) || board == nullptr || signal == nullptr)) {
    return client->Finish(
        Status::InvalidArgument(std::string(what) + ": chunks, board or signal is NULL"));
  }
  Status refused;
  const kvstash_status started =
      Start(client, user_data, call, [&](kvstash::Client& c, kvstash_call* pending) {
        pending->num_chunks = num_chunks;
        kvstash::Result<kvstash::BoardSignal> sent = send(c, *board->board, OutcomesDone(pending));
        if (!sent.ok()) {
          refused = sent.status();
          // Never queued: the caller gets the error and frees the call, so a
          // thread taking completions must not see (and free) it too.
          pending->queue->Forget(pending);
          Complete(pending, refused);
          return;
        }
        *signal = kvstash_board_signal{sent->slot, sent->count, sent->sequence};
      });
  if (started != KVSTASH_OK || refused.ok()) return started;
  kvstash_call_free(*call);
  *call = nullptr;
  return client->Finish(refused);
}

}  // namespace

extern "C" {

kvstash_status kvstash_retrieve_on_stream(kvstash_client* client, uint64_t registration_id,
                                          const kvstash_chunk* chunks, size_t num_chunks,
                                          uint32_t skip_tokens, uint64_t lease_id,
                                          kvstash_board* board, void* stream, uint32_t layer_ranges,
                                          uint64_t user_data, kvstash_board_signal* signal,
                                          kvstash_call** call) {
  return StartOnStream(
      client, chunks, num_chunks, board, signal, user_data, call, "kvstash_retrieve_on_stream",
      [&](kvstash::Client& c, kvstash::CompletionBoard& b, auto done) {
        return c.RetrieveOnStream(registration_id, ChunksOf(chunks, num_chunks), b, stream,
                                  skip_tokens, lease_id, layer_ranges, std::move(done));
      });
}

kvstash_status kvstash_store_on_stream(kvstash_client* client, uint64_t registration_id,
                                       const kvstash_chunk* chunks, size_t num_chunks,
                                       kvstash_board* board, void* stream, uint64_t user_data,
                                       kvstash_board_signal* signal, kvstash_call** call) {
  return StartOnStream(client, chunks, num_chunks, board, signal, user_data, call,
                       "kvstash_store_on_stream",
                       [&](kvstash::Client& c, kvstash::CompletionBoard& b, auto done) {
                         return c.StoreOnStream(registration_id, ChunksOf(chunks, num_chunks), b,
                                                stream, std::move(done));
                       });
}

}  // extern "C"
