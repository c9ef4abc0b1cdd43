// The transfers part of the service: Store and Retrieve, and the transfer
// workers (one per device) that run their copies. Replies come through the
// reply queue when the copies complete. A stored chunk may be written
// below L1 (the chunk store's write-behind); a chunk to retrieve that is not
// in L1 is first promoted from L2 or L3 into a reserved L1 slot, then copied
// like any other.
//
// Store and Retrieve run on the frontend thread; their completions run on
// transfer worker threads and touch only thread-safe state.
#pragma once

#include <atomic>
#include <memory>
#include <optional>
#include <vector>

#include "chunk_store.h"
#include "kvstash/backends/backend.h"
#include "registrations.h"
#include "requests.h"
#include "tier_chain.h"
#include "transfer_worker.h"

namespace kvstash::server {

class Transfers {
 public:
  using Reply = HandlerReply;

  Transfers(const config::ServerConfig& config, Stats& stats, DeferredReplies& deferred,
            Backend& backend, ChunkStore& store, TierChain& tiers,
            const Registrations& registrations);
  ~Transfers();  // finishes queued copies, then joins the workers

  Reply Store(const Request& r, StoreRequest& m);
  Reply Retrieve(const Request& r, RetrieveRequest& m);

  // The daemon is stopping: no copy unit starts from now on (queued and
  // gated jobs are cut off, running copies stop at their next unit).
  void StopCopies();
  // Jobs handed to the workers whose copies have not ended: once 0 after
  // StopCopies, the daemon writes no engine block any more.
  uint64_t copies_in_flight() const { return copies_in_flight_.load(); }
  // Stores held aside until their engine opens their gate
  // (TransferWorker::gates_waiting), every device's.
  uint64_t gates_waiting() const;

 private:
  // What Store and Retrieve both hold once a request is admitted.
  struct Admitted {
    std::shared_ptr<Registration> registration;
    std::optional<CopySignal> signal;  // the GPU-side completion asked for, checked
  };
  // Everything a Store (store = true) or Retrieve is checked for before any
  // slot is reserved or pinned: its registration, its signal (MakeSignal),
  // every chunk's blocks and tokens, the client's requests in flight. A
  // request refused after its signal was made has the signal's slots
  // released with the error.
  Result<Admitted> Admit(const Request& r, const CopyRequest& m, bool store) const;
  // Checks every chunk's blocks and tokens before any copy.
  Status CheckChunks(const Registration& registration, const std::vector<ChunkRequest>& chunks,
                     bool need_tokens) const;
  // A job of request `r` on `reg`, with no chunks yet and room for those of
  // `chunks`.
  static TransferJob NewJob(const Request& r, std::shared_ptr<Registration> reg,
                            const std::vector<ChunkRequest>& chunks);
  // A chunk whose copy failed or was cut off for `why`, counted as timed
  // out or in `failed`.
  void FailChunk(ChunkOutcome& outcome, const Status& why, std::atomic<uint64_t>& failed) const;
  // Retrieve once every chunk that can be is in L1. tickets[i]: chunk i
  // pinned already, else nullopt (it is looked up here); every ticket is
  // ended here or when its copy ends. `begun`: the request already counts
  // among the deferred (it waited for a promotion), so any reply goes
  // through the queue.
  // `signal`: the request's GPU-side completion, checked (MakeSignal).
  Reply RetrieveFromL1(const Request& r, const RetrieveRequest& m,
                       std::shared_ptr<Registration> reg, std::optional<CopySignal> signal,
                       std::vector<std::optional<ChunkStore::ReadTicket>> tickets, bool begun);
  // Hands a Store or Retrieve copy to its device's worker; the reply comes
  // through the reply queue.
  Reply SubmitTransfer(Direction direction, TransferJob job, bool begun = false);

  Stats& stats_;
  DeferredReplies& deferred_;
  ChunkStore* store_;
  TierChain& tiers_;
  const Registrations& registrations_;
  std::atomic<bool> stopping_copies_{false};  // read by the lanes before each copy unit
  std::atomic<uint64_t> copies_in_flight_{0};
  std::vector<std::unique_ptr<TransferWorker>> workers_;  // one per device
};

}  // namespace kvstash::server
