// Registration validation, shared allocations and scopes.
#include "registry.h"

#include <string>

namespace kvstash::server {

void Registration::BeginWork() {
  MutexLock lock(mutex_);
  ++in_flight_;
}

void Registration::EndWork() {
  std::vector<std::function<void()>> ready;
  {
    MutexLock lock(mutex_);
    if (--in_flight_ == 0) ready.swap(drained_);
  }
  for (auto& then : ready) then();
}

void Registration::WhenDrained(std::function<void()> then) {
  {
    MutexLock lock(mutex_);
    if (in_flight_ > 0) {
      drained_.push_back(std::move(then));
      return;
    }
  }
  then();
}

Registry::Registry(Backend& backend, uint32_t chunk_tokens, uint64_t max_chunk_bytes)
    : backend_(backend), chunk_tokens_(chunk_tokens), max_chunk_bytes_(max_chunk_bytes) {
  std::random_device seed;
  std::seed_seq seq{seed(), seed(), seed(), seed(), seed(), seed(), seed(), seed()};
  random_ids_.seed(seq);
}

Result<std::shared_ptr<MappedAllocation>> Registry::OpenShared(const AllocationSpec& spec) {
  // Host shared memory is opened (and its owner and mode checked against the
  // peer) on every registration: a name may have been unlinked and reused
  // since, and a descriptor number closed and reused. CUDA IPC handles open
  // once per process, so they are shared.
  if (spec.kind != AllocationSpec::Kind::kCudaIpc) return backend_.Open(spec);
  const std::string identity = spec.identity();
  {
    MutexLock lock(mutex_);
    auto found = open_.find(identity);
    if (found != open_.end()) {
      if (auto existing = found->second.lock()) {
        if (existing->size_bytes() < spec.size_bytes) {
          return Status::OutOfRange("allocation declared with " + std::to_string(spec.size_bytes) +
                                    " bytes but opened earlier with " +
                                    std::to_string(existing->size_bytes()));
        }
        return existing;
      }
    }
  }
  // Opening may be slow (CUDA IPC): do it outside the lock.
  Result<std::shared_ptr<MappedAllocation>> opened = backend_.Open(spec);
  if (!opened.ok()) return opened;
  MutexLock lock(mutex_);
  open_[identity] = *opened;
  return opened;
}

Result<std::shared_ptr<Registration>> Registry::Register(RegistrationRequest request,
                                                         const PeerId& owner) {
  if (request.tp_size == 0 || request.tp_rank >= request.tp_size) {
    return Status::InvalidArgument("tp_rank " + std::to_string(request.tp_rank) +
                                   " must be below tp_size " + std::to_string(request.tp_size));
  }
  if (request.allocations.empty()) return Status::InvalidArgument("no allocations given");
  std::vector<LayerGeometry> geometries;
  for (size_t i = 0; i < request.layers.size(); ++i) {
    if (request.layers[i].allocation >= request.allocations.size()) {
      return Status::OutOfRange("layer " + std::to_string(i) + " names allocation " +
                                std::to_string(request.layers[i].allocation) + " of " +
                                std::to_string(request.allocations.size()));
    }
    geometries.push_back(request.layers[i].geometry);
  }
  Result<ChunkLayout> layout = ChunkLayout::Build(geometries, chunk_tokens_);
  if (!layout.ok()) return layout.status();
  if (layout->chunk_bytes() > max_chunk_bytes_) {
    return Status::TooLarge("a chunk of this layout takes " +
                            std::to_string(layout->chunk_bytes()) +
                            " bytes, more than an L1 slab of " + std::to_string(max_chunk_bytes_) +
                            " bytes; lower --chunk-tokens or raise --l1-slice-mb");
  }
  // Every extent inside its allocation, checked against the declared size
  // (which Open verified against the real one).
  for (size_t i = 0; i < request.layers.size(); ++i) {
    const LayerSpec& layer = request.layers[i];
    const uint64_t size = request.allocations[layer.allocation].size_bytes;
    const uint64_t extent = LayerExtentBytes(layer.geometry);
    if (layer.offset_bytes > size || extent > size - layer.offset_bytes) {
      return Status::OutOfRange("layer " + std::to_string(i) + " spans bytes [" +
                                std::to_string(layer.offset_bytes) + ", " +
                                std::to_string(layer.offset_bytes + extent) +
                                ") but its allocation holds " + std::to_string(size));
    }
  }
  auto registration = std::make_shared<Registration>();
  for (const AllocationSpec& spec : request.allocations) {
    Result<std::shared_ptr<MappedAllocation>> opened = OpenShared(spec);
    if (!opened.ok()) return opened.status();
    registration->allocations.push_back(*opened);
  }
  registration->device = registration->allocations[0]->device();
  for (const auto& allocation : registration->allocations) {
    if (allocation->device() != registration->device) {
      return Status::InvalidArgument("a registration's allocations must live on one GPU");
    }
  }
  for (const ChunkGroup& group : layout->groups()) {
    GroupAddresses addresses;
    for (uint32_t layer : group.layers) {
      const LayerSpec& spec = request.layers[layer];
      addresses.layer_bases.push_back(registration->allocations[spec.allocation]->base() +
                                      spec.offset_bytes);
    }
    addresses.group = kernels::GroupCopy{group.geometry, group.shape, group.offset_bytes, nullptr};
    registration->groups.push_back(std::move(addresses));
  }
  for (GroupAddresses& g : registration->groups) g.group.layer_bases = g.layer_bases.data();
  KVSTASH_RETURN_IF_ERROR(backend_.CheckRegistration(registration->device, registration->groups,
                                                     layout->chunk_bytes()));
  if (request.board) {
    const int device = registration->device;
    Result<std::shared_ptr<MappedBoard>> board = MappedBoard::Open(
        request.board->shm_name, request.board->size_bytes, request.allocations[0].opener,
        [this, device](uint8_t* base, uint64_t bytes) {
          return backend_.MapBoard(device, base, bytes);
        });
    if (!board.ok()) return board.status();
    registration->board = std::move(*board);
  }
  if (!request.fence_name.empty()) {
    Result<std::shared_ptr<CopyFence>> fence =
        CopyFence::Open(request.fence_name, request.allocations[0].opener);
    if (fence.ok()) {
      registration->fence = std::move(*fence);
    } else if (fence.status().code() == StatusCode::kInvalidArgument) {
      return fence.status();  // names no shared memory object: a bad request, not bad luck
    } else {
      registration->fence_refused = fence.status();  // registered all the same, unfenced
    }
  }

  KeyNamespace ns{request.model,   request.tenant_salt, layout->fingerprint(),
                  request.tp_rank, request.tp_size,     request.replicated_across_ranks};
  registration->namespace_id = NamespaceId(ns);
  registration->layout = std::move(*layout);
  registration->request = std::move(request);

  MutexLock lock(mutex_);
  auto [scope, inserted] = scope_ids_.emplace(registration->namespace_id, ScopeId(scopes_.size()));
  if (inserted) {
    scopes_.push_back(ScopeName{registration->request.model, registration->request.tenant_salt,
                                registration->namespace_id});
  }
  registration->scope = scope->second;
  registration->owner = owner;
  do {
    registration->id = random_ids_();
  } while (registration->id == 0 || registrations_.count(registration->id) != 0);
  registrations_[registration->id] = registration;
  ++owned_[owner];
  return registration;
}

std::shared_ptr<Registration> Registry::Find(uint64_t id) const {
  MutexLock lock(mutex_);
  auto found = registrations_.find(id);
  return found == registrations_.end() ? nullptr : found->second;
}

std::shared_ptr<Registration> Registry::Remove(uint64_t id) {
  MutexLock lock(mutex_);
  auto found = registrations_.find(id);
  if (found == registrations_.end()) return nullptr;
  std::shared_ptr<Registration> removed = std::move(found->second);
  registrations_.erase(found);
  // A store waiting for this engine's gate stops waiting (CopySignal::give_up).
  if (removed->board) removed->board->Abandon();
  auto owned = owned_.find(removed->owner);
  if (owned != owned_.end() && --owned->second == 0) owned_.erase(owned);
  return removed;
}

size_t Registry::size() const {
  MutexLock lock(mutex_);
  return registrations_.size();
}

size_t Registry::CountOwnedBy(const PeerId& owner) const {
  MutexLock lock(mutex_);
  auto found = owned_.find(owner);
  return found == owned_.end() ? 0 : found->second;
}

std::vector<std::shared_ptr<Registration>> Registry::List() const {
  MutexLock lock(mutex_);
  std::vector<std::shared_ptr<Registration>> out;
  for (const auto& [id, registration] : registrations_) out.push_back(registration);
  return out;
}

std::function<bool(ScopeId)> Registry::ScopeMatcher(const std::string& model,
                                                    const std::string& tenant_salt) const {
  MutexLock lock(mutex_);
  std::vector<bool> matches(scopes_.size());
  for (size_t i = 0; i < scopes_.size(); ++i) {
    matches[i] = model.empty() || (scopes_[i].model == model &&
                                   (tenant_salt.empty() || scopes_[i].tenant_salt == tenant_salt));
  }
  return [matches](ScopeId scope) { return scope < matches.size() && matches[scope]; };
}

std::function<bool(ScopeId)> Registry::OwnedScopeMatcher(const PeerId& owner,
                                                         const std::string& model,
                                                         const std::string& tenant_salt) const {
  MutexLock lock(mutex_);
  std::vector<bool> matches(scopes_.size());
  for (const auto& [id, reg] : registrations_) {
    if (reg->owner != owner) continue;
    const RegistrationRequest& r = reg->request;
    if (model.empty() ||
        (r.model == model && (tenant_salt.empty() || r.tenant_salt == tenant_salt))) {
      matches[reg->scope] = true;
    }
  }
  return [matches](ScopeId scope) { return scope < matches.size() && matches[scope]; };
}

}  // namespace kvstash::server
