// RegisterKV and UnregisterKV.
#include <string>

#include "service.h"

namespace kvstash::server {

namespace {

Result<AllocationSpec> ParseAllocation(const wire::Allocation* allocation, size_t index) {
  const std::string where = "allocation " + std::to_string(index);
  if (allocation == nullptr) return Status::InvalidArgument(where + " is missing");
  AllocationSpec spec;
  switch (allocation->handle_type()) {
    case wire::MemoryHandle::HostShmHandle: {
      const wire::HostShmHandle* shm = allocation->handle_as_HostShmHandle();
      if (shm->name() == nullptr) return Status::InvalidArgument(where + " has no shm name");
      spec.kind = AllocationSpec::Kind::kHostShm;
      spec.shm_name = shm->name()->str();
      spec.size_bytes = shm->size_bytes();
      break;
    }
    case wire::MemoryHandle::CudaIpcHandle: {
      const wire::CudaIpcHandle* ipc = allocation->handle_as_CudaIpcHandle();
      if (ipc->ipc_handle() == nullptr || ipc->ipc_handle()->size() != 64) {
        return Status::InvalidArgument(where + ": a CUDA IPC handle has 64 bytes");
      }
      if (ipc->gpu_uuid() == nullptr || ipc->gpu_uuid()->size() != 16) {
        return Status::InvalidArgument(where + ": a GPU UUID has 16 bytes");
      }
      spec.kind = AllocationSpec::Kind::kCudaIpc;
      spec.ipc_handle.assign(ipc->ipc_handle()->begin(), ipc->ipc_handle()->end());
      std::copy(ipc->gpu_uuid()->begin(), ipc->gpu_uuid()->end(), spec.gpu_uuid.begin());
      spec.size_bytes = ipc->size_bytes();
      break;
    }
    default:
      return Status::InvalidArgument(where + " has no memory handle");
  }
  if (spec.size_bytes == 0) return Status::InvalidArgument(where + " declares 0 bytes");
  return spec;
}

}  // namespace

Service::Reply Service::RegisterKV(const Request& r, const wire::RegisterKVRequest& m) {
  RegistrationRequest request;
  request.model = m.model() ? m.model()->str() : "";
  request.tenant_salt = m.tenant_salt() ? m.tenant_salt()->str() : "";
  request.tp_rank = m.tp_rank();
  request.tp_size = m.tp_size();
  if (request.model.empty()) return Status::InvalidArgument("RegisterKV needs a model name");
  KVSTASH_RETURN_IF_ERROR(CheckNameSize("model name", request.model));
  KVSTASH_RETURN_IF_ERROR(CheckNameSize("tenant salt", request.tenant_salt));
  if (m.allocations() == nullptr || m.layers() == nullptr || m.layers()->size() == 0) {
    return Status::InvalidArgument("RegisterKV needs allocations and at least one layer");
  }
  constexpr size_t kMaxLayers = 4096;
  if (m.layers()->size() > kMaxLayers || m.allocations()->size() > kMaxLayers) {
    return Status::TooLarge("RegisterKV names " + std::to_string(m.layers()->size()) +
                            " layers and " + std::to_string(m.allocations()->size()) +
                            " allocations; the limit is " + std::to_string(kMaxLayers));
  }
  for (size_t i = 0; i < m.allocations()->size(); ++i) {
    Result<AllocationSpec> spec = ParseAllocation(m.allocations()->Get(i), i);
    if (!spec.ok()) return spec.status();
    request.allocations.push_back(std::move(*spec));
  }
  for (size_t i = 0; i < m.layers()->size(); ++i) {
    const wire::LayerDesc* layer = m.layers()->Get(i);
    if (layer == nullptr || layer->geometry() == nullptr) {
      return Status::InvalidArgument("layer " + std::to_string(i) + " has no geometry");
    }
    request.layers.push_back(
        LayerSpec{layer->allocation(), layer->offset_bytes(), proto::FromWire(*layer->geometry())});
  }
  if (const size_t held = registry_->CountOwnedBy(r.peer.id);
      held >= config_.max_registrations_per_client) {
    return Status::Exhausted("this client holds " + std::to_string(held) +
                             " registrations; the limit is " +
                             std::to_string(config_.max_registrations_per_client) +
                             " (--max-registrations-per-client)");
  }
  // The backend checks each allocation against what this peer could open.
  for (AllocationSpec& spec : request.allocations) spec.opener = r.peer.credentials;
  Result<std::shared_ptr<Registration>> registered =
      registry_->Register(std::move(request), r.peer.id);
  if (!registered.ok()) return registered.status();
  const Registration& reg = **registered;
  Stats::Add(stats_.registrations);
  peers_.Own(r.peer.id, reg.id, Clock::now());

  flatbuffers::FlatBufferBuilder fbb(1024);
  std::vector<flatbuffers::Offset<wire::GroupInfo>> groups;
  for (const ChunkGroup& group : reg.layout.groups()) {
    auto geometry = proto::ToWire(fbb, group.geometry);
    auto layers = fbb.CreateVector(group.layers);
    groups.push_back(
        wire::CreateGroupInfo(fbb, geometry, layers, group.offset_bytes, group.size_bytes()));
  }
  auto groups_offset = fbb.CreateVector(groups);
  auto fingerprint = fbb.CreateVector(reg.layout.fingerprint().data(), reg.layout.fingerprint().size());
  auto namespace_id = fbb.CreateVector(reg.namespace_id.data(), reg.namespace_id.size());
  auto body = wire::CreateRegisterKVReply(fbb, reg.id, reg.layout.chunk_tokens(),
                                          reg.layout.chunk_bytes(), reg.layout.block_tokens(),
                                          groups_offset, fingerprint, namespace_id);
  return std::optional<proto::Bytes>(
      proto::Finish(fbb, r.id, wire::Body::RegisterKVReply, body.Union()));
}

Service::Reply Service::UnregisterKV(const Request& r, const wire::UnregisterKVRequest& m) {
  KVSTASH_RETURN_IF_ERROR(FindRegistration(m.registration_id(), r.peer).status());
  KVSTASH_RETURN_IF_ERROR(CheckInFlight(r.peer.id));
  std::shared_ptr<Registration> removed = registry_->Remove(m.registration_id());
  if (!removed) return FindRegistration(m.registration_id(), r.peer).status();
  Stats::Add(stats_.unregistrations);
  peers_.Disown(removed->id);
  // Queued work finishes first; the reply comes once it has.
  BeginDeferred(r.peer.id);
  removed->WhenDrained([this, r] {
    flatbuffers::FlatBufferBuilder fbb(64);
    auto body = wire::CreateUnregisterKVReply(fbb);
    Finish(r, proto::Finish(fbb, r.id, wire::Body::UnregisterKVReply, body.Union()));
  });
  return std::optional<proto::Bytes>();
}

}  // namespace kvstash::server
