// RedisRouter: slots, redirections, connections, pipelines, breakers.
#include "redis_router.h"
#include "kvstash/runtime/thread_annotations.h"

#include <poll.h>
#include <sys/time.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>
#include <map>

namespace kvstash::tiers::internal {
namespace {

using Clock = std::chrono::steady_clock;

constexpr int kSlots = kClusterSlots;
constexpr int kMaxRounds = 5;                       // redirections followed per call
constexpr size_t kPipelineWindowBytes = 64u << 20;  // bytes sent before replies are read
constexpr size_t kMaxNodes = 1024;                  // Redis Cluster's own practical limit
// How often a wait looks whether the tier is stopping; also the socket
// timeout, which only a write that found room but could not finish meets.
constexpr int kWaitSliceMs = 50;
// Bytes a reader may hold past the reply's strings: RESP framing and the
// 16 KiB hiredis reads at a time.
constexpr uint64_t kReplySlackBytes = 64u << 10;
// Any reply may be an error line instead (MOVED to a long host name, OOM):
// that much is allowed whatever the command's own bound.
constexpr uint64_t kErrorReplyBytes = 1024;
// CLUSTER SLOTS: 16384 ranges of a few servers each.
constexpr uint64_t kClusterSlotsReplyBytes = 8u << 20;

uint16_t Crc16(const char* buf, size_t len) {
  uint16_t crc = 0;
  for (size_t i = 0; i < len; ++i) {
    crc ^= static_cast<uint16_t>(static_cast<uint8_t>(buf[i]) << 8);
    for (int b = 0; b < 8; ++b)
      crc = (crc & 0x8000) ? static_cast<uint16_t>((crc << 1) ^ 0x1021)
                           : static_cast<uint16_t>(crc << 1);
  }
  return crc;
}

timeval Millis(uint32_t ms) {
  timeval tv{};
  tv.tv_sec = ms / 1000;
  tv.tv_usec = static_cast<suseconds_t>(ms % 1000) * 1000;
  return tv;
}

// Why a context failed, as a Status: a timeout, or the server gone.
Status ContextError(const std::string& endpoint, const redisContext* c) {
  const std::string text =
      "L3 redis " + endpoint + ": " + (c ? c->errstr : "cannot allocate a context");
  if (c && c->err == REDIS_ERR_IO &&
      (std::strstr(c->errstr, "temporarily unavailable") || std::strstr(c->errstr, "timed out"))) {
    return Status::TimedOut(text + " (command timeout)");
  }
  return Status::Unavailable(text);
}

size_t CommandBytes(const RedisCommand& c) {
  size_t n = c.blob_bytes;
  for (const std::string& a : c.args) n += a.size();
  return n;
}

int Append(redisContext* c, const RedisCommand& command) {
  std::vector<const char*> argv;
  std::vector<size_t> lens;
  for (size_t i = 0; i <= command.args.size(); ++i) {
    if (command.blob != nullptr && i == command.blob_at) {
      argv.push_back(reinterpret_cast<const char*>(command.blob));
      lens.push_back(command.blob_bytes);
    }
    if (i < command.args.size()) {
      argv.push_back(command.args[i].data());
      lens.push_back(command.args[i].size());
    }
  }
  return redisAppendCommandArgv(c, static_cast<int>(argv.size()), argv.data(), lens.data());
}

}  // namespace

uint16_t KeySlot(const std::string& key) {
  // The hash tag: the text between the first '{' and the next '}', when
  // not empty; else the whole key.
  const size_t open = key.find('{');
  if (open != std::string::npos) {
    const size_t close = key.find('}', open + 1);
    if (close != std::string::npos && close > open + 1) {
      return Crc16(key.data() + open + 1, close - open - 1) % kSlots;
    }
  }
  return Crc16(key.data(), key.size()) % kSlots;
}

bool SplitEndpoint(const std::string& endpoint, std::string* host, int* port) {
  const size_t colon = endpoint.rfind(':');
  if (colon == std::string::npos || colon == 0 || colon + 1 == endpoint.size()) return false;
  const std::string digits = endpoint.substr(colon + 1);
  if (digits.find_first_not_of("0123456789") != std::string::npos || digits.size() > 5)
    return false;
  const int p = std::stoi(digits);
  if (p < 1 || p > 65535) return false;
  *host = endpoint.substr(0, colon);
  if (host->size() > 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  *port = p;
  return true;
}

RedisRouter::RedisRouter(const RedisTierOptions& options, TierStats& stats)
    : options_(options), stats_(stats) {
  for (const std::string& server : options_.servers) {
    std::string host;
    int port = 0;
    SplitEndpoint(server, &host, &port);  // checked by ParseRedisServers
    seeds_.push_back(NodeIndex(host, port));
  }
}

int RedisRouter::NodeIndex(const std::string& host, int port) {
  const std::string endpoint = host + ":" + std::to_string(port);
  MutexLock lock(mutex_);
  for (size_t i = 0; i < nodes_.size(); ++i) {
    if (nodes_[i]->endpoint == endpoint) return static_cast<int>(i);
  }
  if (nodes_.size() >= kMaxNodes) return -1;
  nodes_.push_back(std::make_unique<Node>(endpoint, host, port, options_.breaker_failures,
                                          std::chrono::milliseconds(options_.breaker_open_ms)));
  return static_cast<int>(nodes_.size() - 1);
}

RedisRouter::Node& RedisRouter::node(int index) {
  MutexLock lock(mutex_);
  return *nodes_[static_cast<size_t>(index)];  // nodes are never removed
}

std::unique_ptr<ConnectionSet> RedisRouter::TakeConnections() {
  MutexLock lock(mutex_);
  if (idle_.empty()) return std::make_unique<ConnectionSet>();
  auto set = std::move(idle_.back());
  idle_.pop_back();
  return set;
}

void RedisRouter::ReturnConnections(std::unique_ptr<ConnectionSet> set) {
  MutexLock lock(mutex_);
  idle_.push_back(std::move(set));
}

void RedisRouter::StopAt(Clock::time_point when) {
  stop_at_ns_.store(
      std::chrono::duration_cast<std::chrono::nanoseconds>(when.time_since_epoch()).count());
}

bool RedisRouter::Stopped() const {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch())
             .count() >= stop_at_ns_.load();
}

void RedisRouter::NodeFailed(int node_index) {
  if (node(node_index).breaker.Failure()) TierStats::Add(stats_.breaker_opens);
  // A failed server may have handed its slots to another (a failover):
  // read the map again before the next call.
  MutexLock lock(mutex_);
  if (topology_ && topology_->cluster) topology_.reset();
}

Status RedisRouter::Await(const Node& n, int fd, short events) {
  // The command timeout is the longest silence allowed, as hiredis's own
  // socket timeout was; waiting in slices keeps a stop prompt.
  const Clock::time_point silent_until =
      Clock::now() + std::chrono::milliseconds(options_.command_timeout_ms);
  for (;;) {
    if (Stopped()) return Status::Unavailable("L3 redis " + n.endpoint + ": the tier is stopping");
    const auto left =
        std::chrono::duration_cast<std::chrono::milliseconds>(silent_until - Clock::now()).count();
    if (left <= 0) {
      return Status::TimedOut("L3 redis " + n.endpoint + ": nothing for " +
                              std::to_string(options_.command_timeout_ms) +
                              " ms (command timeout)");
    }
    pollfd p{fd, events, 0};
    const int ready = ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, kWaitSliceMs)));
    if (ready > 0) return Status::Ok();
    if (ready < 0 && errno != EINTR) {
      return Status::Unavailable("L3 redis " + n.endpoint + ": poll: " + std::strerror(errno));
    }
  }
}

Status RedisRouter::Send(const Node& n, Connection& conn) {
  redisContext* c = conn.context.get();
  for (int done = 0;;) {
    if (redisBufferWrite(c, &done) != REDIS_OK) return ContextError(n.endpoint, c);
    if (done) return Status::Ok();
    KVSTASH_RETURN_IF_ERROR(Await(n, c->fd, POLLOUT));
  }
}

Status RedisRouter::Receive(const Node& n, Connection& conn, uint64_t max_reply_bytes, Reply* out) {
  redisContext* c = conn.context.get();
  max_reply_bytes = std::max(max_reply_bytes, kErrorReplyBytes);
  conn.budget.Reset(kMaxReplyElements, max_reply_bytes);
  for (;;) {
    void* raw = nullptr;
    if (redisGetReplyFromReader(c, &raw) != REDIS_OK) {
      if (!conn.budget.refused().empty()) {
        return Status::Unavailable("L3 redis " + n.endpoint +
                                   ": reply refused: " + conn.budget.refused());
      }
      return ContextError(n.endpoint, c);
    }
    if (raw != nullptr) {
      out->reset(static_cast<redisReply*>(raw));
      return Status::Ok();
    }
    // A string is buffered whole before the reader builds it: bound the
    // buffer, not only what is built.
    const uint64_t buffered = c->reader->len - c->reader->pos;
    if (buffered > max_reply_bytes + kReplySlackBytes) {
      return Status::Unavailable("L3 redis " + n.endpoint + ": reply refused: over " +
                                 std::to_string(buffered) + " bytes where at most " +
                                 std::to_string(max_reply_bytes) + " were expected");
    }
    KVSTASH_RETURN_IF_ERROR(Await(n, c->fd, POLLIN));
    if (redisBufferRead(c) != REDIS_OK) return ContextError(n.endpoint, c);
  }
}

Status RedisRouter::Call(const Node& n, Connection& conn, const RedisCommand& command, Reply* out) {
  if (Append(conn.context.get(), command) != REDIS_OK)
    return ContextError(n.endpoint, conn.context.get());
  KVSTASH_RETURN_IF_ERROR(Send(n, conn));
  return Receive(n, conn, command.max_reply_bytes, out);
}

Connection* RedisRouter::Connect(ConnectionSet& set, int node_index, Status* why) {
  auto found = set.contexts.find(node_index);
  if (found != set.contexts.end()) return found->second.get();
  Node& n = node(node_index);
  if (Stopped()) {
    *why = Status::Unavailable("L3 redis " + n.endpoint + ": the tier is stopping");
    return nullptr;
  }
  auto conn = std::make_unique<Connection>();
  conn->context.reset(
      redisConnectWithTimeout(n.host.c_str(), n.port, Millis(options_.connect_timeout_ms)));
  redisContext* c = conn->context.get();
  if (!c || c->err) {
    *why = ContextError(n.endpoint, c);
    return nullptr;
  }
  redisSetTimeout(c, Millis(kWaitSliceMs));
  redisEnableKeepAlive(c);
  conn->budget.Install(c->reader);
  if (!options_.password.empty()) {
    RedisCommand auth;
    auth.args = {"AUTH"};
    if (!options_.user.empty()) auth.args.push_back(options_.user);
    auth.args.push_back(options_.password);
    Reply r;
    if (Status s = Call(n, *conn, auth, &r); !s.ok()) {
      *why = s;
      return nullptr;
    }
    if (r->type != REDIS_REPLY_STATUS) {
      *why = Status::Unavailable("L3 redis " + n.endpoint + ": AUTH" +
                                 (options_.user.empty() ? "" : " as user " + options_.user) +
                                 " failed: " + ReplyText(r.get()));
      return nullptr;
    }
  }
  return (set.contexts[node_index] = std::move(conn)).get();
}

std::shared_ptr<const RedisRouter::Topology> RedisRouter::CurrentTopology(ConnectionSet& set,
                                                                          Status* why) {
  {
    MutexLock lock(mutex_);
    if (topology_) return topology_;
  }
  return Refresh(set, why);
}

std::shared_ptr<const RedisRouter::Topology> RedisRouter::Refresh(ConnectionSet& set, Status* why) {
  // One refresh at a time; the others wait for its outcome.
  MutexLock refreshing(refresh_mutex_);
  std::vector<int> candidates;
  {
    MutexLock lock(mutex_);
    if (topology_) return topology_;
    if (std::chrono::steady_clock::now() < next_refresh_) {
      *why = last_refresh_error_;
      return nullptr;
    }
    for (size_t i = 0; i < nodes_.size(); ++i) candidates.push_back(static_cast<int>(i));
  }
  Status last = Status::Unavailable("L3 redis: no server configured");
  for (int index : candidates) {
    if (Stopped()) break;
    Node& n = node(index);
    if (!n.breaker.Allow()) {
      last = Status::Unavailable("L3 redis " + n.endpoint + ": circuit breaker open");
      continue;
    }
    Connection* conn = Connect(set, index, &last);
    if (conn == nullptr) {
      NodeFailed(index);
      continue;
    }
    RedisCommand slots;
    slots.args = {"CLUSTER", "SLOTS"};
    slots.max_reply_bytes = kClusterSlotsReplyBytes;
    Reply r;
    if (Status s = Call(n, *conn, slots, &r); !s.ok()) {
      last = s;
      set.contexts.erase(index);
      NodeFailed(index);
      continue;
    }
    auto topology = std::make_shared<Topology>();
    topology->slot_node.assign(kSlots, -1);
    if (r->type == REDIS_REPLY_ERROR) {
      // Not a cluster: the listed servers are shards.
      for (int s = 0; s < kSlots; ++s)
        topology->slot_node[s] = seeds_[static_cast<size_t>(s) % seeds_.size()];
    } else {
      // A map we cannot trust whole is not used at all: a slot sent to the
      // wrong server would only be redirected, a bad field could be worse.
      Result<std::vector<SlotRange>> ranges = ParseClusterSlots(r.get());
      Status bad = ranges.status();
      topology->cluster = true;
      for (size_t i = 0; bad.ok() && i < ranges->size(); ++i) {
        const SlotRange& range = (*ranges)[i];
        const int owner = NodeIndex(range.host.empty() ? n.host : range.host, range.port);
        if (owner < 0) {
          bad = Status::Unavailable("CLUSTER SLOTS names more than " + std::to_string(kMaxNodes) +
                                    " servers");
          break;
        }
        for (int s = range.first; s <= range.last; ++s)
          topology->slot_node[static_cast<size_t>(s)] = owner;
      }
      if (!bad.ok()) {
        last = Status::Unavailable("L3 redis " + n.endpoint + ": " + bad.message());
        set.contexts.erase(index);
        NodeFailed(index);
        continue;
      }
    }
    n.breaker.Success();
    MutexLock lock(mutex_);
    topology_ = topology;
    return topology;
  }
  MutexLock lock(mutex_);
  // Fail fast until then: a dead Redis costs one round of timeouts per
  // breaker period, not one per call.
  next_refresh_ =
      std::chrono::steady_clock::now() + std::chrono::milliseconds(options_.breaker_open_ms);
  last_refresh_error_ = Status(last.code(), last.message() + " (no server answered; next try in " +
                                                std::to_string(options_.breaker_open_ms) + " ms)");
  *why = last_refresh_error_;
  return nullptr;
}

void RedisRouter::Execute(ConnectionSet& set, const std::vector<RedisItem*>& items) {
  for (int round = 0; round < kMaxRounds; ++round) {
    std::vector<RedisItem*> pending;
    for (RedisItem* item : items) {
      if (item->status.ok() && item->replies.size() != item->commands.size())
        pending.push_back(item);
    }
    if (pending.empty()) return;
    if (Stopped()) {
      for (RedisItem* item : pending) item->status = Status::Unavailable("L3 is stopping");
      return;
    }
    Status why;
    std::shared_ptr<const Topology> topology = CurrentTopology(set, &why);
    if (!topology) {
      for (RedisItem* item : pending) item->status = why;
      return;
    }
    std::map<int, std::vector<RedisItem*>> by_node;
    for (RedisItem* item : pending) {
      const int target = item->ask_node >= 0 ? item->ask_node : topology->slot_node[item->slot];
      if (target < 0) {
        item->status =
            Status::Unavailable("L3 redis: no server serves slot " + std::to_string(item->slot));
        continue;
      }
      by_node[target].push_back(item);
    }
    bool moved = false;
    for (auto& [target, group] : by_node) {
      RunPipeline(set, target, group);
      for (RedisItem* item : group) moved = moved || item->moved;
    }
    if (moved) {
      MutexLock lock(mutex_);
      topology_.reset();
      next_refresh_ = {};
    }
  }
  for (RedisItem* item : items) {
    if (item->status.ok() && item->replies.size() != item->commands.size()) {
      item->status =
          Status::Unavailable("L3 redis: still redirected after " + std::to_string(kMaxRounds) +
                              " rounds (the cluster is resharding)");
    }
  }
}

void RedisRouter::RunPipeline(ConnectionSet& set, int node_index,
                              const std::vector<RedisItem*>& items) {
  Node& n = node(node_index);
  if (!n.breaker.Allow()) {
    TierStats::Add(stats_.breaker_rejections, items.size());
    for (RedisItem* item : items) {
      item->status = Status::Unavailable(
          "L3 redis " + n.endpoint + ": circuit breaker open after " +
          std::to_string(n.breaker.consecutive_failures()) + " failures; next try in " +
          std::to_string(n.breaker.RetryInMs()) + " ms");
    }
    return;
  }
  // A connection kept from earlier may have died with a server since
  // restarted: then the batch is sent once more on a fresh one (every
  // command we send is idempotent).
  const bool reused = set.contexts.count(node_index) != 0;
  Status failure = Pipeline(set, node_index, items);
  if (!failure.ok() && reused && !Stopped()) failure = Pipeline(set, node_index, items);
  if (failure.ok()) {
    n.breaker.Success();
    return;
  }
  set.contexts.erase(node_index);
  NodeFailed(node_index);
  for (RedisItem* item : items) {
    if (item->replies.size() != item->commands.size()) {
      item->replies.clear();
      item->status = failure;
    }
  }
}

Status RedisRouter::Pipeline(ConnectionSet& set, int node_index,
                             const std::vector<RedisItem*>& items) {
  Node& n = node(node_index);
  Status why;
  Connection* conn = Connect(set, node_index, &why);
  if (conn == nullptr) return why;
  redisContext* c = conn->context.get();
  // Any failure drops the connection: what it would read next is unknown.
  auto broken = [&](Status status) {
    set.contexts.erase(node_index);
    return status;
  };
  size_t begin = 0;
  while (begin < items.size()) {
    // Send a window of items, then read their replies.
    size_t end = begin;
    size_t bytes = 0;
    while (end < items.size() && (end == begin || bytes < kPipelineWindowBytes)) {
      RedisItem* item = items[end];
      item->replies.clear();
      item->moved = false;
      const bool asking = item->ask_node == node_index;
      if (asking && redisAppendCommand(c, "ASKING") != REDIS_OK)
        return broken(ContextError(n.endpoint, c));
      for (const RedisCommand& command : item->commands) {
        if (Append(c, command) != REDIS_OK) return broken(ContextError(n.endpoint, c));
        bytes += CommandBytes(command);
      }
      ++end;
    }
    if (Status s = Send(n, *conn); !s.ok()) return broken(s);
    for (size_t i = begin; i < end; ++i) {
      RedisItem* item = items[i];
      const bool asking = item->ask_node == node_index;
      if (asking) {
        Reply ignored;
        if (Status s = Receive(n, *conn, 4096, &ignored); !s.ok()) return broken(s);
      }
      int redirect_to = -1;
      bool moved = false;
      for (const RedisCommand& command : item->commands) {
        Reply reply;
        if (Status s = Receive(n, *conn, command.max_reply_bytes, &reply); !s.ok())
          return broken(s);
        Redirect redirect;
        if (ParseRedirect(reply.get(), &redirect)) {
          const int target =
              NodeIndex(redirect.host.empty() ? n.host : redirect.host, redirect.port);
          if (target >= 0) redirect_to = target;  // else: failed with the error's text
          moved = moved || redirect.moved;
        }
        item->replies.push_back(std::move(reply));
      }
      item->ask_node = -1;
      if (redirect_to >= 0) {
        // Sent again next round: to the new owner (MOVED, with the slot map
        // read again) or once to the importing server (ASK).
        item->replies.clear();
        item->moved = moved;
        item->ask_node = moved ? -1 : redirect_to;
      }
    }
    begin = end;
  }
  return Status::Ok();
}

}  // namespace kvstash::tiers::internal
