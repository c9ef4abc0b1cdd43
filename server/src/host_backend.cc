// POSIX shared memory and CPU copies.
#include "host_backend.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <memory>
#include <cstring>
#include <string>

namespace kvstash::server {

std::string AllocationSpec::identity() const {
  if (kind == Kind::kHostShm) return "shm:" + shm_name;
  std::string id = "cuda:";
  id.append(reinterpret_cast<const char*>(ipc_handle.data()), ipc_handle.size());
  return id;
}

namespace {

class ShmAllocation : public MappedAllocation {
 public:
  ShmAllocation(uint8_t* base, uint64_t size) : base_(base), size_(size) {}
  ~ShmAllocation() override { munmap(base_, size_); }
  uint8_t* base() const override { return base_; }
  uint64_t size_bytes() const override { return size_; }
  int device() const override { return 0; }

 private:
  uint8_t* base_;
  uint64_t size_;
};

Status CheckShmName(const std::string& name) {
  if (name.size() < 2 || name.size() > 255 || name[0] != '/' ||
      name.find('/', 1) != std::string::npos) {
    return Status::InvalidArgument("shared memory name \"" + name +
                                   "\" must be \"/name\" with no other '/' and under 256 bytes");
  }
  return Status::Ok();
}

}  // namespace

HostBackend::HostBackend(size_t copy_threads) : pool_(copy_threads > 0 ? copy_threads - 1 : 0) {}

Result<std::shared_ptr<MappedAllocation>> HostBackend::Open(const AllocationSpec& spec) {
  if (spec.kind != AllocationSpec::Kind::kHostShm) {
    return Status::InvalidArgument(
        "the host backend takes POSIX shared memory allocations, not CUDA IPC handles; "
        "start kvstashd with --backend cuda on a GPU machine");
  }
  KVSTASH_RETURN_IF_ERROR(CheckShmName(spec.shm_name));
  const int fd = shm_open(spec.shm_name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    return Status::NotFound("cannot open shared memory " + spec.shm_name + ": " +
                            std::strerror(errno));
  }
  struct stat st {};
  if (fstat(fd, &st) != 0) {
    const int error = errno;
    close(fd);
    return Status::NotFound("cannot stat shared memory " + spec.shm_name + ": " + std::strerror(error));
  }
  // The daemon may open more than the engine: check what the engine itself
  // could open, on the object the fd names (no name lookup in between).
  if (Status allowed = MayReadWrite(spec.opener, st.st_uid, st.st_gid, st.st_mode, spec.shm_name);
      !allowed.ok()) {
    close(fd);
    return allowed;
  }
  if (uint64_t(st.st_size) < spec.size_bytes || spec.size_bytes == 0) {
    const uint64_t actual = uint64_t(st.st_size);
    close(fd);
    return Status::OutOfRange("shared memory " + spec.shm_name + " holds " +
                              std::to_string(actual) + " bytes, not the " +
                              std::to_string(spec.size_bytes) + " bytes declared");
  }
  void* base = mmap(nullptr, spec.size_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (base == MAP_FAILED) {
    return Status::Exhausted("mmap of shared memory " + spec.shm_name + " failed: " +
                             std::strerror(errno));
  }
  return std::shared_ptr<MappedAllocation>(
      std::make_shared<ShmAllocation>(static_cast<uint8_t*>(base), spec.size_bytes));
}

SlabHooks HostBackend::slab_hooks() {
  SlabHooks hooks;
  // Touch every page now, in the background, so the first stores do not pay
  // page faults on the hot path.
  hooks.prepare = [](uint8_t* data, uint64_t bytes) {
    const long page = sysconf(_SC_PAGESIZE);
    for (uint64_t off = 0; off < bytes; off += uint64_t(page)) data[off] = 0;
    return Status::Ok();
  };
  return hooks;
}

Status HostBackend::Copy(Direction direction, int /*device*/,
                         const std::vector<GroupAddresses>& groups,
                         const std::vector<kernels::ChunkCopy>& chunks, CopyDeadlines& deadlines) {
  // One task per (layer, chunk): a single large chunk spreads over every
  // thread, and so do many small ones. A one-layer slice of a group is the
  // same group with the layer's flat offset.
  std::vector<kernels::GroupCopy> layers;
  for (const GroupAddresses& g : groups) {
    kernels::GroupCopy one = g.group;
    one.shape.num_layers = 1;
    const uint64_t layer_bytes = FlatGroupBytes(one.shape);
    for (uint32_t l = 0; l < g.group.shape.num_layers; ++l) {
      one.flat_offset_bytes = g.group.flat_offset_bytes + l * layer_bytes;
      one.layer_bases = g.group.layer_bases + l;
      layers.push_back(one);
    }
  }
  const size_t tasks = layers.size() * chunks.size();
  std::vector<Status> failures(tasks);
  // Each task is a copy unit: it checks its chunk's deadline before it
  // starts (tasks of one chunk may mark it from several threads).
  std::unique_ptr<std::atomic<bool>[]> missed(new std::atomic<bool>[chunks.size()]);
  for (size_t c = 0; c < chunks.size(); ++c) missed[c] = false;
  pool_.ParallelFor(tasks, [&](size_t i) {
    const size_t c = i % chunks.size();
    if (deadlines.any() && (missed[c].load(std::memory_order_relaxed) ||
                            deadlines.Passed(c, std::chrono::steady_clock::now()))) {
      missed[c].store(true, std::memory_order_relaxed);
      return;
    }
    const kernels::GroupCopy& layer = layers[i / chunks.size()];
    const kernels::ChunkCopy& chunk = chunks[c];
    failures[i] = direction == Direction::kStore ? kernels::GatherChunksCpu(layer, &chunk, 1)
                                                 : kernels::ScatterChunksCpu(layer, &chunk, 1);
  });
  deadlines.missed.resize(chunks.size());
  for (size_t c = 0; c < chunks.size(); ++c) deadlines.missed[c] = missed[c].load() ? 1 : 0;
  for (Status& s : failures) {
    if (!s.ok()) return s;
  }
  return Status::Ok();
}

}  // namespace kvstash::server
