// What kvstashd accepts from a Redis server, checked before it acts on it.
// Whoever answers on the Redis port (there is no TLS with hiredis 0.14) can
// send any bytes, so replies are untrusted input: the reader refuses a
// reply larger than its command can need (array elements, string bytes)
// before allocating for it, and each reply the router acts on is parsed
// here, every field checked, into plain values. Internal to kvstash::tiers.
//
// Not thread-safe: a ReplyBudget belongs to its connection's thread.
#pragma once

#include <hiredis/hiredis.h>

#include <cstdint>
#include <string>
#include <vector>

#include "kvstash/status.h"

namespace kvstash::tiers::internal {

inline constexpr int kClusterSlots = 16384;
// Array elements in one reply, all levels together: CLUSTER SLOTS of a
// cluster whose every slot is its own range with a few replicas stays
// under it. Each element costs the reader a pointer before its bytes come.
inline constexpr uint64_t kMaxReplyElements = 1u << 18;

// What the reader may build for the reply being read; its functions refuse
// (the reader then fails with a protocol error) past it.
class ReplyBudget {
 public:
  // Replaces `reader`'s object functions with bounded ones that build the
  // same redisReply objects (freeReplyObject frees them). The budget must
  // outlive the reader; one budget per reader.
  void Install(redisReader* reader);
  // Before each reply: at most `elements` array elements and `bytes` of
  // strings in it.
  void Reset(uint64_t elements, uint64_t bytes);
  // Why the last reply was refused ("" when it was not).
  const std::string& refused() const { return refused_; }

 private:
  static void* CreateString(const redisReadTask* task, char* str, size_t len);
  static void* CreateArray(const redisReadTask* task, int elements);
  static void* CreateInteger(const redisReadTask* task, long long value);
  static void* CreateNil(const redisReadTask* task);
  static void FreeObject(void* reply);
  // Whether the task's place in its parent exists (the reader never asks
  // otherwise; checked so that a reader bug cannot write past an array).
  static bool Fits(const redisReadTask* task);

  const redisReplyObjectFunctions* base_ = nullptr;  // the reader's own
  redisReplyObjectFunctions bounded_{};
  uint64_t elements_left_ = 0;
  uint64_t bytes_left_ = 0;
  std::string refused_;
};

// One range of CLUSTER SLOTS: slots [first, last] served by host:port.
struct SlotRange {
  int first = 0;
  int last = 0;
  std::string host;  // "" when the server said "" or "?": the one asked
  int port = 0;
};

// CLUSTER SLOTS' reply, every field checked: an array of ranges, each
// [first slot, last slot, [host, port, ...], replicas...] with
// 0 <= first <= last < 16384, a host string of at most 255 bytes and a port
// in [1, 65535]. Any other shape is an error naming what was wrong.
Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply* reply);

// A redirection: "MOVED <slot> <host>:<port>" or "ASK <slot> <host>:<port>".
struct Redirect {
  bool moved = false;  // else ASK
  int slot = 0;
  std::string host;  // "" when the server left it out: the one asked
  int port = 0;
};
// Whether `reply` is a redirection error, and which. Errors of other kinds
// and malformed redirections are not redirections (the caller fails the
// command with the error's text).
bool ParseRedirect(const redisReply* reply, Redirect* out);

// The text of an error or status reply, at most 200 bytes of it (replies
// go into messages and logs).
std::string ReplyText(const redisReply* reply);

}  // namespace kvstash::tiers::internal
