// Registrations: one engine rank's registered KV memory, with its layout,
// groups and the scope its chunks live in. Opens each shared allocation once
// and shares it between layers and registrations; an allocation closes when
// the last registration using it goes.
//
// Thread-safe. A Registration is immutable once built (but for its work
// count and traffic counters) and shared by shared_ptr, so queued work keeps
// its memory mapped until it finishes.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

#include "chunk_store.h"
#include "copy_fence.h"
#include "kvstash/backends/backend.h"
#include "kvstash/backends/mapped_board.h"
#include "kvstash/chunk_layout.h"
#include "kvstash/keys.h"
#include "kvstash/runtime/thread_annotations.h"
#include "peer_budget.h"
#include "stats.h"

namespace kvstash::server {

// The copy engines' words: what the registry opens through a backend, and
// what the transfer workers hand it.
using backends::AllocationSpec;
using backends::Backend;
using backends::CopyDeadlines;
using backends::CopyLayout;
using backends::CopySignal;
using backends::Direction;
using backends::GroupAddresses;
using backends::MappedAllocation;
using backends::MappedBoard;

struct LayerSpec {
  uint32_t allocation = 0;
  uint64_t offset_bytes = 0;
  LayerGeometry geometry;
};

// The engine's completion board, as named on the wire.
struct BoardSpec {
  std::string shm_name;
  uint64_t size_bytes = 0;
};

struct RegistrationRequest {
  std::string model;
  std::string tenant_salt;
  uint32_t tp_rank = 0;
  uint32_t tp_size = 1;
  bool replicated_across_ranks = false;  // the engine says so (MLA); never inferred
  std::vector<AllocationSpec> allocations;
  std::vector<LayerSpec> layers;
  std::optional<BoardSpec> board;
  std::string fence_name;  // the engine's copy fence; empty: none
};

class Registration {
 public:
  uint64_t id = 0;  // random, never 0: not guessable
  PeerId owner;     // the connection that registered it; only it may use it
  ScopeId scope = 0;
  RegistrationRequest request;  // allocations and layers as registered
  ChunkLayout layout;
  ChunkKey namespace_id{};
  int device = 0;
  std::vector<std::shared_ptr<MappedAllocation>> allocations;
  std::vector<GroupAddresses> groups;  // per layout group, for the copy engine
  std::shared_ptr<MappedBoard> board;  // null: no GPU-side completion
  // Null: no fence (none named, or it could not be opened: fence_refused
  // says why); its requests are then cut off by their deadlines alone. A
  // name that is no shared memory object (a FIFO...) refuses the
  // registration instead.
  std::shared_ptr<CopyFence> fence;
  Status fence_refused;
  RegistrationStats stats;  // its share of the traffic
  PeerBudget::Hold charge;  // what it costs its peer; given back when the last holder lets go

  // Work in flight: Unregister answers only once it has drained.
  void BeginWork();
  void EndWork();
  // Runs `then` once no work is in flight (at once if none is).
  void WhenDrained(std::function<void()> then);

 private:
  Mutex mutex_;
  uint64_t in_flight_ KVSTASH_GUARDED_BY(mutex_) = 0;
  std::vector<std::function<void()>> drained_ KVSTASH_GUARDED_BY(mutex_);
};

class Registry {
 public:
  Registry(Backend& backend, uint32_t chunk_tokens, uint64_t max_chunk_bytes);

  // Validates, opens the allocations, checks every layer extent against its
  // allocation, builds the layout and interns the scope.
  // Ids are random 64-bit values, never 0, never reused while registered.
  Result<std::shared_ptr<Registration>> Register(RegistrationRequest request, const PeerId& owner);
  std::shared_ptr<Registration> Find(uint64_t id) const;
  // Removes it from the registry; in-flight work still holds it.
  std::shared_ptr<Registration> Remove(uint64_t id);
  std::vector<std::shared_ptr<Registration>> List() const;
  size_t size() const;
  // Registrations `owner` holds now.
  size_t CountOwnedBy(const PeerId& owner) const;
  // Scopes of a model (and tenant salt); an empty model matches every scope.
  std::function<bool(ScopeId)> ScopeMatcher(const std::string& model,
                                            const std::string& tenant_salt) const;
  // The same, limited to scopes of registrations `owner` holds now.
  std::function<bool(ScopeId)> OwnedScopeMatcher(const PeerId& owner, const std::string& model,
                                                 const std::string& tenant_salt) const;

 private:
  struct ScopeName {
    std::string model;
    std::string tenant_salt;
    ChunkKey namespace_id;
  };
  Result<std::shared_ptr<MappedAllocation>> OpenShared(const AllocationSpec& spec);

  Backend& backend_;
  const uint32_t chunk_tokens_;
  const uint64_t max_chunk_bytes_;
  mutable Mutex mutex_;
  std::mt19937_64 random_ids_ KVSTASH_GUARDED_BY(mutex_);
  std::map<PeerId, size_t> owned_ KVSTASH_GUARDED_BY(mutex_);
  std::map<uint64_t, std::shared_ptr<Registration>> registrations_ KVSTASH_GUARDED_BY(mutex_);
  std::map<std::string, std::weak_ptr<MappedAllocation>> open_ KVSTASH_GUARDED_BY(mutex_);
  std::map<ChunkKey, ScopeId> scope_ids_ KVSTASH_GUARDED_BY(mutex_);
  std::vector<ScopeName> scopes_ KVSTASH_GUARDED_BY(mutex_);
};

}  // namespace kvstash::server
