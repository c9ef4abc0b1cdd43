// L2: chunks on the node's local disk, one file per chunk under a directory
// (--l2-path), with its own LRU and capacity (--l2-gb).
//
// Files: DIR/<2 hex>/<scope hex>-<key hex>.kvc, written with O_DIRECT
// through io_uring (two threads with many chunks in flight; a pool of
// threads doing preadv/pwritev where io_uring is refused) to DIR/tmp/ and
// renamed into place once complete, so a file under its final name was
// written whole; a crash of the machine can still leave a renamed file
// whose blocks never reached the disk, which its checksums catch on read. After a restart, Open()
// rebuilds the index from the files' headers alone (DIR/tmp is emptied). A file that is truncated,
// corrupt or names another chunk is deleted and reported missing.
//
// One daemon per directory: Open() takes an exclusive lock on DIR/LOCK, and
// the tier holds it until its destructor has finished every queued write
// (a clean stop drains the queue). Open() waits up to `lock_wait_ms` for a
// holder that is stopping.
//
// Thread-safe: one mutex guards the index; I/O runs outside it on the
// tier's threads.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/tiers/tier.h"

namespace kvstash::tiers {

struct DiskTierOptions {
  std::string path;             // directory; created if absent
  uint64_t capacity_bytes = 0;  // file bytes (header block + padded payload)
  bool io_uring = true;         // false, or io_uring refused: the thread pool
  // io_uring: rings, a thread each. Each thread also checksums, opens and
  // renames its chunks: two keep the disk fed when the CPU is contended
  // (one did not, in the daemon's tests on a loaded 2-core machine).
  uint32_t io_rings = 2;
  uint32_t io_depth = 8;          // io_uring: chunks in flight per ring
  uint32_t io_threads = 4;        // the thread pool: threads, a chunk in flight each
  uint32_t scan_threads = 8;      // header reads in parallel while rebuilding
  bool direct_io = true;          // O_DIRECT where the file system allows it
  uint32_t lock_wait_ms = 10000;  // for DIR/LOCK held by a daemon still draining
};

// What Open() found on disk.
struct DiskRebuildReport {
  uint64_t chunks = 0;         // indexed
  uint64_t bytes = 0;          // their file bytes
  uint64_t dropped_files = 0;  // invalid, deleted
  uint64_t evicted_files = 0;  // valid but over capacity, deleted (oldest first)
  uint64_t temp_files = 0;     // unfinished writes, deleted
  double seconds = 0;
};

class DiskTier final : public Tier {
 public:
  static Result<std::unique_ptr<DiskTier>> Open(const DiskTierOptions& options);
  ~DiskTier() override;

  const std::string& name() const override;
  void Put(std::vector<PutRequest> batch, PutDone done) override;
  void Get(std::vector<GetRequest> batch, GetDone done) override;
  // Answered from the in-memory index, on the caller's thread.
  void Contains(std::vector<ChunkId> ids, ContainsDone done) override;
  void Remove(std::vector<ChunkId> ids, RemoveDone done) override;
  TierUsage Usage() const override;
  const TierStats& stats() const override;

  // Keeps chunks from eviction and removal while a lookup lease holds them
  // (a leased L2 chunk stays readable until the lease ends). Returns, per
  // id, whether it was present and is now pinned; each pin needs an Unpin.
  std::vector<bool> Pin(const std::vector<ChunkId>& ids);
  void Unpin(const std::vector<ChunkId>& ids);

  const DiskRebuildReport& rebuild_report() const;
  // "io_uring" or "thread pool"; with the pool where io_uring was asked
  // for, why it was refused (for the daemon's log).
  const char* io_engine() const;
  const std::string& io_uring_refused_reason() const;

  // The file a chunk lives in (tests corrupt it on purpose).
  std::string PathOf(const ChunkId& id) const;

  class Impl;

 private:
  explicit DiskTier(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace kvstash::tiers
