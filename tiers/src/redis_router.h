// Sends pipelined commands to the right Redis server: the slot map (from
// CLUSTER SLOTS, or slot modulo the servers when they are not a cluster),
// MOVED / ASK redirections, connections with timeouts and AUTH, and a
// circuit breaker per server. Internal to kvstash::tiers.
//
// Replies are untrusted input (redis_reply.h): each connection's reader is
// bounded per command, every field the router acts on is checked, and every
// wait polls the socket in short slices, so a reply can neither make it
// allocate without bound nor keep it from stopping.
//
// Thread-safe: the node list and slot map are shared under a mutex;
// connections belong to one thread at a time (a ConnectionSet is taken from
// a pool for each job).
#pragma once

#include <hiredis/hiredis.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "circuit_breaker.h"
#include "kvstash/runtime/thread_annotations.h"
#include "kvstash/status.h"
#include "kvstash/tiers/redis_tier.h"
#include "kvstash/tiers/tier_stats.h"
#include "redis_reply.h"

namespace kvstash::tiers::internal {

struct ReplyFree {
  void operator()(redisReply* r) const { freeReplyObject(r); }
};
using Reply = std::unique_ptr<redisReply, ReplyFree>;

// CRC16-XMODEM of the key's hash tag, modulo 16384 (the Redis Cluster slot).
uint16_t KeySlot(const std::string& key);

// One command. `args` are the arguments; when `blob` is set, it is sent as
// argument number `blob_at` (inserted there), without a copy on our side.
// `max_reply_bytes`: the most string bytes its reply may hold (a longer
// reply fails the connection before it is buffered whole).
struct RedisCommand {
  std::vector<std::string> args;
  const uint8_t* blob = nullptr;
  size_t blob_bytes = 0;
  size_t blob_at = 0;
  uint64_t max_reply_bytes = 4096;
};

// The commands of one chunk, all for one slot, and their replies.
struct RedisItem {
  uint16_t slot = 0;
  std::vector<RedisCommand> commands;
  std::vector<Reply> replies;  // one per command once done
  Status status;               // not Ok: the item failed as a whole
  // Routing state across rounds.
  int ask_node = -1;
  bool moved = false;
};

// One connection to a server, and the bounds its reader enforces.
struct Connection {
  struct ContextFree {
    void operator()(redisContext* c) const { redisFree(c); }
  };
  std::unique_ptr<redisContext, ContextFree> context;
  ReplyBudget budget;  // installed in context's reader: lives as long
};

// One thread's connections, by node index.
class ConnectionSet {
 public:
  std::unordered_map<int, std::unique_ptr<Connection>> contexts;
};

class RedisRouter {
 public:
  RedisRouter(const RedisTierOptions& options, TierStats& stats);

  // Runs every item's commands, pipelined per server; fills replies or
  // sets status. Follows redirections up to a few rounds.
  void Execute(ConnectionSet& connections, const std::vector<RedisItem*>& items);

  std::unique_ptr<ConnectionSet> TakeConnections();
  void ReturnConnections(std::unique_ptr<ConnectionSet> set);

  // From `when` on, every wait for a server fails at once (Unavailable):
  // what is queued still runs until then, and nothing waits past it.
  void StopAt(std::chrono::steady_clock::time_point when);

 private:
  struct Node {
    std::string endpoint;  // "host:port"
    std::string host;
    int port = 0;
    CircuitBreaker breaker;
    Node(std::string e, std::string h, int p, uint32_t failures, std::chrono::milliseconds open)
        : endpoint(std::move(e)), host(std::move(h)), port(p), breaker(failures, open) {}
  };
  struct Topology {
    bool cluster = false;
    std::vector<int> slot_node;  // 16384 entries; -1: no node serves it
  };

  // The node's index, added when new; -1 past kMaxNodes (a reply naming
  // ever more servers must not grow the list without bound).
  int NodeIndex(const std::string& host, int port);
  Node& node(int index);
  std::shared_ptr<const Topology> CurrentTopology(ConnectionSet& connections, Status* why);
  std::shared_ptr<const Topology> Refresh(ConnectionSet& connections, Status* why);
  Connection* Connect(ConnectionSet& connections, int node_index, Status* why);
  // Waits until `fd` is ready for `events`: at most the command timeout,
  // never past StopAt.
  Status Await(const Node& n, int fd, short events);
  // Sends what the connection has buffered.
  Status Send(const Node& n, Connection& conn);
  // Reads the next reply, refused past `max_reply_bytes` of strings.
  Status Receive(const Node& n, Connection& conn, uint64_t max_reply_bytes, Reply* out);
  // Sends one command and reads its reply.
  Status Call(const Node& n, Connection& conn, const RedisCommand& command, Reply* out);
  bool Stopped() const;
  void RunPipeline(ConnectionSet& connections, int node_index,
                   const std::vector<RedisItem*>& items);
  // One attempt: sends the items' commands in windows and reads the
  // replies. Not Ok when the connection failed (it is then dropped).
  Status Pipeline(ConnectionSet& connections, int node_index, const std::vector<RedisItem*>& items);
  void NodeFailed(int node_index);

  const RedisTierOptions options_;
  TierStats& stats_;
  std::atomic<int64_t> stop_at_ns_{INT64_MAX};  // steady_clock; INT64_MAX: running
  std::vector<int> seeds_;                      // node indices of options_.servers, in order

  Mutex refresh_mutex_;  // held while the slot map is read; taken before mutex_
  Mutex mutex_;
  std::vector<std::unique_ptr<Node>> nodes_ KVSTASH_GUARDED_BY(mutex_);  // append-only
  std::shared_ptr<const Topology> topology_ KVSTASH_GUARDED_BY(mutex_);  // null: refresh
  std::chrono::steady_clock::time_point next_refresh_
      KVSTASH_GUARDED_BY(mutex_){};  // after a failed refresh
  Status last_refresh_error_ KVSTASH_GUARDED_BY(mutex_);
  std::vector<std::unique_ptr<ConnectionSet>> idle_ KVSTASH_GUARDED_BY(mutex_);
};

// "host:port" -> host, port; false when malformed.
bool SplitEndpoint(const std::string& endpoint, std::string* host, int* port);

}  // namespace kvstash::tiers::internal
