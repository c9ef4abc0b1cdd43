// io_uring rings (one thread each) or, where io_uring is refused, a thread
// pool doing the same transfers synchronously.
#include "io_engine.h"
#include "kvstash/runtime/thread_annotations.h"

#include <liburing.h>
#include <pthread.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <deque>
#include <mutex>
#include <optional>
#include <thread>

#include "kvstash/runtime/work_queue.h"

namespace kvstash::tiers::internal {
namespace {

// One transfer, possibly continued after a short read or write.
struct Op {
  int fd = -1;
  bool write = false;
  std::vector<iovec> iov;
  size_t first = 0;  // iov[first] is the next buffer to move
  off_t offset = 0;
  int64_t moved = 0;
  IoEngine::TransferDone done;

  // Accounts `n` bytes moved; whether any are left.
  bool Advance(size_t n) {
    moved += static_cast<int64_t>(n);
    offset += static_cast<off_t>(n);
    while (first < iov.size() && n >= iov[first].iov_len) n -= iov[first++].iov_len;
    if (first < iov.size()) {
      iov[first].iov_base = static_cast<uint8_t*>(iov[first].iov_base) + n;
      iov[first].iov_len -= n;
    }
    return first < iov.size();
  }
  unsigned Count() const {
    return static_cast<unsigned>(std::min<size_t>(iov.size() - first, IOV_MAX));
  }
};

// The synchronous transfer of the thread pool: preadv/pwritev until done.
int64_t TransferNow(Op& op) {
  while (op.first < op.iov.size()) {
    const ssize_t n =
        op.write ? ::pwritev(op.fd, &op.iov[op.first], static_cast<int>(op.Count()), op.offset)
                 : ::preadv(op.fd, &op.iov[op.first], static_cast<int>(op.Count()), op.offset);
    if (n < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    if (n == 0) break;  // end of file
    op.Advance(static_cast<size_t>(n));
  }
  return op.moved;
}

constexpr uint64_t kWakeTag = 1;  // user data of the eventfd read; Ops are pointers

class Ring;
// The ring whose thread is running (a job or a callback calls Transfer).
thread_local Ring* current_ring = nullptr;

// One io_uring and the thread that owns it: it runs queued jobs while fewer
// than `depth` transfers are in flight, submits, and reaps completions.
class Ring {
 public:
  Ring(io_uring ring, int event_fd, uint32_t depth, const std::string& name)
      : ring_(ring), event_fd_(event_fd), depth_(depth) {
    thread_ = std::thread([this] { Run(); });
    pthread_setname_np(thread_.native_handle(), name.substr(0, 15).c_str());
  }
  ~Ring() {
    {
      MutexLock lock(mutex_);
      stopping_ = true;
    }
    Wake();
    thread_.join();
    io_uring_queue_exit(&ring_);
    ::close(event_fd_);
  }

  void Post(std::function<void()> job) {
    {
      MutexLock lock(mutex_);
      jobs_.push_back(std::move(job));
    }
    Wake();
  }

  void Submit(Op* op) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {  // full: hand the queued ones to the kernel
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    if (op->write) {
      io_uring_prep_writev(sqe, op->fd, &op->iov[op->first], op->Count(),
                           static_cast<uint64_t>(op->offset));
    } else {
      io_uring_prep_readv(sqe, op->fd, &op->iov[op->first], op->Count(),
                          static_cast<uint64_t>(op->offset));
    }
    io_uring_sqe_set_data64(sqe, reinterpret_cast<uint64_t>(op));
  }

  // Submitted at once rather than after the jobs that follow: the next
  // job's checksum (about 1 ms per 8 MiB) then overlaps this transfer.
  void Start(Op* op) {
    ++in_flight_;
    Submit(op);
    io_uring_submit(&ring_);
  }

 private:
  void Wake() {
    const uint64_t one = 1;
    (void)!::write(event_fd_, &one, sizeof(one));
  }

  void ArmWake() {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_);
    while (sqe == nullptr) {
      io_uring_submit(&ring_);
      sqe = io_uring_get_sqe(&ring_);
    }
    io_uring_prep_read(sqe, event_fd_, &wake_value_, sizeof(wake_value_), 0);
    io_uring_sqe_set_data64(sqe, kWakeTag);
  }

  std::optional<std::function<void()>> NextJob() {
    MutexLock lock(mutex_);
    if (jobs_.empty()) return std::nullopt;
    std::function<void()> job = std::move(jobs_.front());
    jobs_.pop_front();
    return job;
  }

  bool Finished() {
    MutexLock lock(mutex_);
    return stopping_ && jobs_.empty() && in_flight_ == 0;
  }

  void Complete(Op* op, int res) {
    if (res == -EINTR || res == -EAGAIN) return Submit(op);
    if (res > 0 && op->Advance(static_cast<size_t>(res))) return Submit(op);  // short: go on
    --in_flight_;
    std::unique_ptr<Op> owned(op);
    owned->done(res < 0 ? res : owned->moved);
  }

  void Run() {
    current_ring = this;
    ArmWake();
    for (;;) {
      while (in_flight_ < depth_) {
        std::optional<std::function<void()>> job = NextJob();
        if (!job) break;
        (*job)();
      }
      if (Finished()) break;
      io_uring_submit_and_wait(&ring_, 1);
      io_uring_cqe* cqe = nullptr;
      unsigned head = 0, seen = 0;
      std::vector<std::pair<uint64_t, int>> completed;
      io_uring_for_each_cqe(&ring_, head, cqe) {
        completed.emplace_back(io_uring_cqe_get_data64(cqe), cqe->res);
        ++seen;
      }
      io_uring_cq_advance(&ring_, seen);
      // Callbacks after the completion queue is released: they may submit.
      for (const auto& [data, res] : completed) {
        if (data == kWakeTag) {
          ArmWake();
        } else {
          Complete(reinterpret_cast<Op*>(data), res);
        }
      }
    }
    current_ring = nullptr;
  }

  io_uring ring_;
  const int event_fd_;
  const uint32_t depth_;
  uint64_t wake_value_ = 0;  // the eventfd read's target; ring thread only
  uint32_t in_flight_ = 0;   // ring thread only (read by Finished on it)

  Mutex mutex_;
  std::deque<std::function<void()>> jobs_ KVSTASH_GUARDED_BY(mutex_);
  bool stopping_ KVSTASH_GUARDED_BY(mutex_) = false;
  std::thread thread_;
};

}  // namespace

class IoEngine::Impl {
 public:
  explicit Impl(const IoEngineOptions& options) {
    if (options.use_io_uring) {
      const uint32_t depth = std::max<uint32_t>(1, options.depth);
      for (uint32_t i = 0; i < std::max<uint32_t>(1, options.rings); ++i) {
        io_uring ring;
        const int err = io_uring_queue_init(2 * depth + 8, &ring, 0);
        if (err < 0) {
          fallback_reason_ = std::string("io_uring_queue_init failed: ") + std::strerror(-err);
          rings_.clear();
          break;
        }
        const int event_fd = ::eventfd(0, EFD_CLOEXEC);
        if (event_fd < 0) {
          fallback_reason_ = std::string("eventfd failed: ") + std::strerror(errno);
          io_uring_queue_exit(&ring);
          rings_.clear();
          break;
        }
        rings_.push_back(std::make_unique<Ring>(ring, event_fd, depth, options.name));
      }
    }
    if (rings_.empty()) pool_.emplace(std::max<uint32_t>(1, options.pool_threads), options.name);
  }

  std::string fallback_reason_;
  std::atomic<uint64_t> next_ring_{0};
  std::vector<std::unique_ptr<Ring>> rings_;
  std::optional<runtime::WorkQueue> pool_;
};

IoEngine::IoEngine(const IoEngineOptions& options) : impl_(std::make_unique<Impl>(options)) {}
IoEngine::~IoEngine() = default;

const char* IoEngine::kind() const { return impl_->rings_.empty() ? "thread pool" : "io_uring"; }
const std::string& IoEngine::fallback_reason() const { return impl_->fallback_reason_; }

void IoEngine::Post(std::function<void()> job) {
  if (impl_->pool_) return impl_->pool_->Post(std::move(job));
  const uint64_t i = impl_->next_ring_.fetch_add(1, std::memory_order_relaxed);
  impl_->rings_[i % impl_->rings_.size()]->Post(std::move(job));
}

void IoEngine::Transfer(int fd, bool write, std::vector<iovec> iov, off_t offset,
                        TransferDone done) {
  auto op = std::make_unique<Op>();
  op->fd = fd;
  op->write = write;
  op->iov = std::move(iov);
  op->offset = offset;
  op->done = std::move(done);
  if (op->iov.empty()) return op->done(0);
  if (current_ring == nullptr) {  // the pool (or a misuse: still correct, just synchronous)
    const int64_t res = TransferNow(*op);
    return op->done(res);
  }
  current_ring->Start(op.release());
}

}  // namespace kvstash::tiers::internal
