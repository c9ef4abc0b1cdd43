// DiskTier: the index, its LRU and capacity, the I/O jobs and the rebuild
// from disk (see disk_tier.h).
#include "kvstash/tiers/disk_tier.h"
#include "kvstash/runtime/thread_annotations.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <thread>
#include <unordered_map>

#include "batch.h"
#include "disk_file.h"
#include "hex.h"
#include "io_engine.h"

namespace kvstash::tiers {

using internal::Batch;
using internal::ChunkFileBytes;

namespace {

using Clock = std::chrono::steady_clock;

uint64_t MicrosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

Status MakeDir(const std::string& path) {
  if (::mkdir(path.c_str(), 0750) == 0 || errno == EEXIST) return Status::Ok();
  return Status::Internal("cannot create directory " + path + ": " + std::strerror(errno));
}

std::vector<std::string> ListDir(const std::string& path) {
  std::vector<std::string> names;
  DIR* dir = ::opendir(path.c_str());
  if (dir == nullptr) return names;
  while (dirent* e = ::readdir(dir)) {
    if (e->d_name[0] != '.') names.emplace_back(e->d_name);
  }
  ::closedir(dir);
  return names;
}

constexpr const char* kSuffix = ".kvc";
constexpr size_t kHexBytes = 64;  // 32 bytes as hex
constexpr size_t kFileNameBytes = kHexBytes + 1 + kHexBytes + 4;

}  // namespace

class DiskTier::Impl {
 public:
  explicit Impl(DiskTierOptions options)
      : options_(std::move(options)), io_(EngineOptions(options_)) {}

  static internal::IoEngineOptions EngineOptions(const DiskTierOptions& o) {
    internal::IoEngineOptions e;
    e.use_io_uring = o.io_uring;
    e.rings = std::max<uint32_t>(1, o.io_rings);
    e.depth = std::max<uint32_t>(1, o.io_depth);
    e.pool_threads = std::max<uint32_t>(1, o.io_threads);
    e.name = "kvstash-l2";
    return e;
  }

  Status OpenDir();
  void Rebuild();

  void PutOne(const PutRequest& request, const std::shared_ptr<Batch<PutResult>>& batch, size_t i);
  void FinishPut(const ChunkHeader& header, const std::string& temp_path, Status written,
                 Clock::time_point start, const std::shared_ptr<Batch<PutResult>>& batch, size_t i);
  void GetOne(const GetRequest& request, const std::shared_ptr<Batch<GetResult>>& batch, size_t i);
  void FinishGet(const GetRequest& request, Result<ChunkHeader> read, Clock::time_point start,
                 const std::shared_ptr<Batch<GetResult>>& batch, size_t i);

  std::string PathOf(const ChunkId& id) const {
    const std::string key = ToHex(id.key);
    return options_.path + "/" + key.substr(0, 2) + "/" + ToHex(id.scope.data(), 32) + "-" + key +
           kSuffix;
  }

  struct Entry {
    ChunkHeader header;
    uint64_t file_bytes = 0;
    bool ready = false;   // written and renamed into place
    bool doomed = false;  // removed while pinned or being written
    uint32_t pins = 0;
    bool in_lru = false;
    std::list<ChunkId>::iterator lru_it;
  };
  using Index = std::unordered_map<ChunkId, Entry, ChunkIdHash>;

  // Drops an entry from the index; its file goes on `unlink_paths`, which
  // the caller deletes after releasing the lock.
  void EraseLocked(Index::iterator it, std::vector<std::string>* unlink_paths)
      KVSTASH_REQUIRES(mutex_) {
    if (it->second.in_lru) lru_.erase(it->second.lru_it);
    used_bytes_ -= it->second.file_bytes;
    unlink_paths->push_back(PathOf(it->first));
    index_.erase(it);
  }
  // Marks an entry removed: gone at once when nothing holds it, else when
  // its last pin or its write ends.
  void DoomLocked(Index::iterator it, std::vector<std::string>* unlink_paths)
      KVSTASH_REQUIRES(mutex_) {
    Entry& e = it->second;
    if (e.pins == 0 && e.ready) return EraseLocked(it, unlink_paths);
    e.doomed = true;
    if (e.in_lru) {
      lru_.erase(e.lru_it);
      e.in_lru = false;
    }
  }
  void TouchLocked(Entry& e) KVSTASH_REQUIRES(mutex_) {
    if (e.in_lru) lru_.splice(lru_.begin(), lru_, e.lru_it);
  }
  // Evicts least recently used, unpinned chunks until `need` more bytes
  // fit. Evicts nothing when they cannot be made to fit.
  bool MakeRoomLocked(uint64_t need, std::vector<std::string>* unlink_paths)
      KVSTASH_REQUIRES(mutex_) {
    if (used_bytes_ + need <= options_.capacity_bytes) return true;
    uint64_t freed = 0;
    std::vector<ChunkId> victims;
    for (auto it = lru_.rbegin();
         it != lru_.rend() && used_bytes_ - freed + need > options_.capacity_bytes; ++it) {
      const Entry& e = index_.at(*it);
      if (e.pins > 0) continue;
      freed += e.file_bytes;
      victims.push_back(*it);
    }
    if (used_bytes_ - freed + need > options_.capacity_bytes) return false;
    for (const ChunkId& id : victims) {
      auto it = index_.find(id);
      TierStats::Add(stats_.evicted_chunks);
      TierStats::Add(stats_.evicted_bytes, it->second.header.payload_bytes);
      EraseLocked(it, unlink_paths);
    }
    return true;
  }

  static void Unlink(const std::vector<std::string>& paths) {
    for (const std::string& p : paths) ::unlink(p.c_str());
  }

  const DiskTierOptions options_;
  const std::string name_ = "l2-disk";
  TierStats stats_;
  DiskRebuildReport report_;
  // DIR/LOCK, held until the last write has landed: it outlives io_, whose
  // destructor finishes every queued write, so that a daemon started while
  // this one stops cannot empty DIR/tmp under writes still to be renamed.
  struct LockFile {
    int fd = -1;
    ~LockFile() {
      if (fd >= 0) ::close(fd);
    }
  } lock_;
  std::atomic<uint64_t> temp_counter_{0};

  mutable Mutex mutex_;
  Index index_ KVSTASH_GUARDED_BY(mutex_);
  std::list<ChunkId> lru_ KVSTASH_GUARDED_BY(mutex_);   // front = most recent, ready entries only
  uint64_t used_bytes_ KVSTASH_GUARDED_BY(mutex_) = 0;  // file bytes, written or being written

  internal::IoEngine io_;  // last: its threads finish their work before the rest goes
};

Status DiskTier::Impl::OpenDir() {
  if (options_.path.empty()) return Status::InvalidArgument("--l2-path is empty");
  KVSTASH_RETURN_IF_ERROR(MakeDir(options_.path));
  KVSTASH_RETURN_IF_ERROR(MakeDir(options_.path + "/tmp"));
  for (int i = 0; i < 256; ++i) {
    char sub[4];
    std::snprintf(sub, sizeof(sub), "%02x", i);
    KVSTASH_RETURN_IF_ERROR(MakeDir(options_.path + "/" + sub));
  }
  const std::string lock_path = options_.path + "/LOCK";
  lock_.fd = ::open(lock_path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0640);
  if (lock_.fd < 0)
    return Status::Internal("cannot open " + lock_path + ": " + std::strerror(errno));
  // A daemon that is stopping holds the lock until its last write landed:
  // wait for that, a while, rather than refuse a restart that overlaps it.
  const auto give_up = Clock::now() + std::chrono::milliseconds(options_.lock_wait_ms);
  while (::flock(lock_.fd, LOCK_EX | LOCK_NB) != 0) {
    if (Clock::now() >= give_up) {
      return Status::Unavailable("L2 directory " + options_.path +
                                 " is in use by another process (" + lock_path + " is locked)");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return Status::Ok();
}

void DiskTier::Impl::Rebuild() {
  const auto start = Clock::now();
  const std::string tmp = options_.path + "/tmp";
  for (const std::string& name : ListDir(tmp)) {
    ::unlink((tmp + "/" + name).c_str());
    ++report_.temp_files;
  }

  struct Found {
    ChunkHeader header;
    uint64_t file_bytes;
    int64_t mtime_ns;
  };
  std::vector<std::vector<Found>> found(std::max<uint32_t>(1, options_.scan_threads));
  std::atomic<uint64_t> dropped{0};
  std::atomic<int> next_dir{0};
  auto scan = [&](size_t worker) {
    for (int d; (d = next_dir.fetch_add(1)) < 256;) {
      char sub[4];
      std::snprintf(sub, sizeof(sub), "%02x", d);
      const std::string dir = options_.path + "/" + sub;
      for (const std::string& name : ListDir(dir)) {
        const std::string path = dir + "/" + name;
        ChunkId id;
        const bool named = name.size() == kFileNameBytes && name[kHexBytes] == '-' &&
                           name.compare(kFileNameBytes - 4, 4, kSuffix) == 0 &&
                           internal::FromHex(name.data(), kHexBytes, id.scope.data()) &&
                           internal::FromHex(name.data() + kHexBytes + 1, kHexBytes, id.key.data());
        Result<internal::ChunkFileInfo> info =
            named ? internal::ReadChunkFileHeader(path)
                  : Result<internal::ChunkFileInfo>(Status::NotFound(""));
        if (!info.ok() || info->header.id != id ||
            info->file_bytes != ChunkFileBytes(info->header.payload_bytes)) {
          ::unlink(path.c_str());
          dropped.fetch_add(1);
          continue;
        }
        found[worker].push_back({info->header, info->file_bytes, info->mtime_ns});
      }
    }
  };
  std::vector<std::thread> threads;
  for (size_t w = 1; w < found.size(); ++w) threads.emplace_back(scan, w);
  scan(0);
  for (std::thread& t : threads) t.join();

  std::vector<Found> all;
  for (auto& part : found) all.insert(all.end(), part.begin(), part.end());
  // Oldest first: each goes to the front of the LRU, so the newest ends there.
  std::sort(all.begin(), all.end(),
            [](const Found& a, const Found& b) { return a.mtime_ns < b.mtime_ns; });
  std::vector<std::string> unlink_paths;
  MutexLock lock(mutex_);
  for (const Found& f : all) {
    Entry& e = index_[f.header.id];
    e.header = f.header;
    e.file_bytes = f.file_bytes;
    e.ready = true;
    lru_.push_front(f.header.id);
    e.lru_it = lru_.begin();
    e.in_lru = true;
    used_bytes_ += f.file_bytes;
  }
  // A smaller --l2-gb than last time: keep the newest.
  while (used_bytes_ > options_.capacity_bytes && !lru_.empty()) {
    EraseLocked(index_.find(lru_.back()), &unlink_paths);
    ++report_.evicted_files;
  }
  Unlink(unlink_paths);
  report_.chunks = index_.size();
  report_.bytes = used_bytes_;
  report_.dropped_files = dropped.load();
  report_.seconds = std::chrono::duration<double>(Clock::now() - start).count();
}

void DiskTier::Impl::PutOne(const PutRequest& r, const std::shared_ptr<Batch<PutResult>>& batch,
                            size_t i) {
  const auto start = Clock::now();
  const uint64_t need = ChunkFileBytes(r.payload_bytes);
  std::vector<std::string> unlink_paths;
  // Decided under the lock; reported after it (a callback may call us).
  std::optional<PutResult> early;
  {
    MutexLock lock(mutex_);
    auto it = index_.find(r.id);
    if (it != index_.end() && !it->second.doomed) {
      TouchLocked(it->second);
      TierStats::Add(stats_.put_already_present);
      early = PutResult{PutOutcome::kAlreadyPresent, Status::Ok()};
    } else if (it != index_.end()) {
      early = PutResult{PutOutcome::kFailed, Status::Unavailable("chunk " + ToHex(r.id.key) +
                                                                 " is being removed from L2")};
    } else if (need > options_.capacity_bytes) {
      early = PutResult{PutOutcome::kFailed,
                        Status::TooLarge("chunk file of " + std::to_string(need) +
                                         " bytes exceeds the L2 capacity of " +
                                         std::to_string(options_.capacity_bytes) + " bytes")};
    } else if (!MakeRoomLocked(need, &unlink_paths)) {
      early = PutResult{PutOutcome::kFailed,
                        Status::Exhausted("L2 has no room for " + std::to_string(need) +
                                          " bytes: " + std::to_string(used_bytes_) + " of " +
                                          std::to_string(options_.capacity_bytes) +
                                          " bytes are pinned or being written")};
    } else {
      Entry& e = index_[r.id];
      e.file_bytes = need;
      used_bytes_ += need;
    }
  }
  if (early) {
    if (early->outcome == PutOutcome::kFailed) TierStats::Add(stats_.put_errors);
    return batch->Finish(i, std::move(*early));
  }
  Unlink(unlink_paths);
  unlink_paths.clear();

  ChunkHeader header;
  header.id = r.id;
  header.layout_fingerprint = r.layout_fingerprint;
  header.num_tokens = r.num_tokens;
  header.payload_bytes = r.payload_bytes;
  header.payload_checksum = PayloadChecksum(r.payload, r.payload_bytes);
  const std::string temp_path =
      options_.path + "/tmp/" + std::to_string(temp_counter_.fetch_add(1)) + ".tmp";
  Result<int> fd = internal::CreateChunkFile(temp_path, options_.direct_io);
  if (!fd.ok()) return FinishPut(header, temp_path, fd.status(), start, batch, i);
  // Written whole under a temporary name, renamed into place once complete:
  // a crash mid-write leaves only a temporary file, which Open() deletes.
  auto io = std::make_shared<internal::ChunkFileIo>();
  internal::PrepareChunkWrite(header, r.payload, *io);
  io_.Transfer(*fd, true, io->iov, 0,
               [this, io, fd = *fd, header, temp_path, start, batch, i](int64_t moved) {
                 ::close(fd);
                 Status written;
                 if (moved < 0) {
                   written = Status::Internal("cannot write " + temp_path + ": " +
                                              std::strerror(static_cast<int>(-moved)));
                 } else if (static_cast<uint64_t>(moved) != io->bytes) {
                   written = Status::Internal("short write to " + temp_path);
                 }
                 FinishPut(header, temp_path, std::move(written), start, batch, i);
               });
}

void DiskTier::Impl::FinishPut(const ChunkHeader& header, const std::string& temp_path,
                               Status written, Clock::time_point start,
                               const std::shared_ptr<Batch<PutResult>>& batch, size_t i) {
  const std::string final_path = PathOf(header.id);
  if (written.ok() && ::rename(temp_path.c_str(), final_path.c_str()) != 0) {
    written = Status::Internal("cannot rename " + temp_path + " to " + final_path + ": " +
                               std::strerror(errno));
  }
  if (!written.ok()) ::unlink(temp_path.c_str());

  std::vector<std::string> unlink_paths;
  {
    MutexLock lock(mutex_);
    auto it = index_.find(header.id);
    Entry& e = it->second;
    if (!written.ok()) {
      used_bytes_ -= e.file_bytes;
      index_.erase(it);
    } else {
      e.header = header;
      e.ready = true;
      if (e.doomed) {
        EraseLocked(it, &unlink_paths);
      } else {
        lru_.push_front(header.id);
        e.lru_it = lru_.begin();
        e.in_lru = true;
      }
    }
  }
  Unlink(unlink_paths);
  if (!written.ok()) {
    TierStats::Add(stats_.put_errors);
    return batch->Finish(i, {PutOutcome::kFailed, std::move(written)});
  }
  TierStats::Add(stats_.put_chunks);
  TierStats::Add(stats_.put_bytes, header.payload_bytes);
  stats_.put_latency.Record(MicrosSince(start));
  batch->Finish(i, {PutOutcome::kStored, Status::Ok()});
}

void DiskTier::Impl::GetOne(const GetRequest& r, const std::shared_ptr<Batch<GetResult>>& batch,
                            size_t i) {
  const auto start = Clock::now();
  const ChunkId& id = r.expect.id;
  bool found = false;
  {
    MutexLock lock(mutex_);
    auto it = index_.find(id);
    if (it != index_.end() && it->second.ready && !it->second.doomed) {
      ++it->second.pins;  // held while reading: never evicted under us
      TouchLocked(it->second);
      found = true;
    }
  }
  if (!found) {
    TierStats::Add(stats_.get_misses);
    return batch->Finish(i, {Status::NotFound("chunk " + ToHex(id.key) + " is not in L2"), 0});
  }
  const std::string path = PathOf(id);
  Result<int> fd =
      internal::OpenChunkFile(path, ChunkFileBytes(r.expect.payload_bytes), options_.direct_io);
  if (!fd.ok()) return FinishGet(r, fd.status(), start, batch, i);
  auto io = std::make_shared<internal::ChunkFileIo>();
  internal::PrepareChunkRead(r.expect.payload_bytes, r.payload, *io);
  io_.Transfer(*fd, false, io->iov, 0,
               [this, io, fd = *fd, r, path, start, batch, i](int64_t moved) {
                 ::close(fd);
                 FinishGet(r, internal::FinishChunkRead(path, r.expect, r.payload, *io, moved),
                           start, batch, i);
               });
}

void DiskTier::Impl::FinishGet(const GetRequest& r, Result<ChunkHeader> read,
                               Clock::time_point start,
                               const std::shared_ptr<Batch<GetResult>>& batch, size_t i) {
  const ChunkId& id = r.expect.id;
  std::vector<std::string> unlink_paths;
  {
    MutexLock lock(mutex_);
    auto it = index_.find(id);
    // Our pin keeps the entry; only an Unpin without its Pin could take
    // it, and that must not crash the daemon.
    if (it != index_.end()) {
      --it->second.pins;
      if (!read.ok() && read.status().code() == StatusCode::kNotFound) {
        DoomLocked(it, &unlink_paths);  // never served again
      } else if (it->second.doomed && it->second.pins == 0) {
        EraseLocked(it, &unlink_paths);
      }
    }
  }
  Unlink(unlink_paths);
  if (!read.ok()) {
    if (read.status().code() == StatusCode::kNotFound) {
      TierStats::Add(stats_.corrupt_chunks);
      TierStats::Add(stats_.get_misses);
    } else {
      TierStats::Add(stats_.get_errors);
    }
    return batch->Finish(i, {read.status(), 0});
  }
  TierStats::Add(stats_.get_hits);
  TierStats::Add(stats_.get_bytes, r.expect.payload_bytes);
  stats_.get_latency.Record(MicrosSince(start));
  batch->Finish(i, {Status::Ok(), read->num_tokens});
}

Result<std::unique_ptr<DiskTier>> DiskTier::Open(const DiskTierOptions& options) {
  auto impl = std::make_unique<Impl>(options);
  KVSTASH_RETURN_IF_ERROR(impl->OpenDir());
  impl->Rebuild();
  return std::unique_ptr<DiskTier>(new DiskTier(std::move(impl)));
}

DiskTier::DiskTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
DiskTier::~DiskTier() = default;

const std::string& DiskTier::name() const { return impl_->name_; }

void DiskTier::Put(std::vector<PutRequest> batch, PutDone done) {
  auto requests = std::make_shared<std::vector<PutRequest>>(std::move(batch));
  auto results = Batch<PutResult>::Make(requests->size(), std::move(done));
  for (size_t i = 0; i < requests->size(); ++i) {
    impl_->io_.Post([this, requests, results, i] { impl_->PutOne((*requests)[i], results, i); });
  }
}

void DiskTier::Get(std::vector<GetRequest> batch, GetDone done) {
  auto requests = std::make_shared<std::vector<GetRequest>>(std::move(batch));
  auto results = Batch<GetResult>::Make(requests->size(), std::move(done));
  for (size_t i = 0; i < requests->size(); ++i) {
    impl_->io_.Post([this, requests, results, i] { impl_->GetOne((*requests)[i], results, i); });
  }
}

void DiskTier::Contains(std::vector<ChunkId> ids, ContainsDone done) {
  std::vector<Presence> out(ids.size());
  {
    MutexLock lock(impl_->mutex_);
    for (size_t i = 0; i < ids.size(); ++i) {
      auto it = impl_->index_.find(ids[i]);
      if (it != impl_->index_.end() && it->second.ready && !it->second.doomed) {
        out[i].present = true;
        out[i].header = it->second.header;
      }
    }
  }
  TierStats::Add(impl_->stats_.contains_requests, ids.size());
  done(std::move(out));
}

void DiskTier::Remove(std::vector<ChunkId> ids, RemoveDone done) {
  std::vector<std::string> unlink_paths;
  {
    MutexLock lock(impl_->mutex_);
    for (const ChunkId& id : ids) {
      auto it = impl_->index_.find(id);
      if (it == impl_->index_.end() || it->second.doomed) continue;
      TierStats::Add(impl_->stats_.removed_chunks);
      impl_->DoomLocked(it, &unlink_paths);
    }
  }
  Impl::Unlink(unlink_paths);
  done(std::vector<Status>(ids.size()));
}

std::vector<bool> DiskTier::Pin(const std::vector<ChunkId>& ids) {
  std::vector<bool> pinned(ids.size(), false);
  MutexLock lock(impl_->mutex_);
  for (size_t i = 0; i < ids.size(); ++i) {
    auto it = impl_->index_.find(ids[i]);
    if (it == impl_->index_.end() || !it->second.ready || it->second.doomed) continue;
    ++it->second.pins;
    pinned[i] = true;
  }
  return pinned;
}

void DiskTier::Unpin(const std::vector<ChunkId>& ids) {
  std::vector<std::string> unlink_paths;
  {
    MutexLock lock(impl_->mutex_);
    for (const ChunkId& id : ids) {
      auto it = impl_->index_.find(id);
      if (it == impl_->index_.end() || it->second.pins == 0) continue;
      if (--it->second.pins == 0 && it->second.doomed) impl_->EraseLocked(it, &unlink_paths);
    }
  }
  Impl::Unlink(unlink_paths);
}

TierUsage DiskTier::Usage() const {
  MutexLock lock(impl_->mutex_);
  return {impl_->options_.capacity_bytes, impl_->used_bytes_, impl_->index_.size()};
}

const TierStats& DiskTier::stats() const { return impl_->stats_; }
const DiskRebuildReport& DiskTier::rebuild_report() const { return impl_->report_; }
const char* DiskTier::io_engine() const { return impl_->io_.kind(); }
const std::string& DiskTier::io_uring_refused_reason() const {
  return impl_->io_.fallback_reason();
}
std::string DiskTier::PathOf(const ChunkId& id) const { return impl_->PathOf(id); }

}  // namespace kvstash::tiers
