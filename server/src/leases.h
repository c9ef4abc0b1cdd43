// The leases part of the service: Lookup and the Release of what it leased.
// A lease belongs to the connection that took it.
//
// Frontend thread; the chunk store is thread-safe.
#pragma once

#include "chunk_store.h"
#include "registrations.h"
#include "requests.h"

namespace kvstash::server {

class Leases {
 public:
  using Reply = HandlerReply;

  Leases(const config::ServerConfig& config, Stats& stats, ChunkStore& store,
         const Registrations& registrations)
      : config_(config), stats_(stats), store_(&store), registrations_(registrations) {}

  Reply Lookup(const Request& r, const LookupRequest& m);
  Reply Release(const Request& r, const ReleaseRequest& m);

 private:
  const config::ServerConfig& config_;
  Stats& stats_;
  ChunkStore* store_;
  const Registrations& registrations_;
};

}  // namespace kvstash::server
