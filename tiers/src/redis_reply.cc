// The bounded reply reader and the parsers of the replies the router acts on.
#include "redis_reply.h"

#include <hiredis/read.h>

#include <algorithm>
#include <cstring>

namespace kvstash::tiers::internal {
namespace {

ReplyBudget* BudgetOf(const redisReadTask* task) {
  return static_cast<ReplyBudget*>(task->privdata);
}

bool IsInteger(const redisReply* r) { return r != nullptr && r->type == REDIS_REPLY_INTEGER; }

// "host:port" with a port in [1, 65535]; an IPv6 host may be bracketed.
bool SplitHostPort(const std::string& text, std::string* host, int* port) {
  const size_t colon = text.rfind(':');
  if (colon == std::string::npos || colon + 1 == text.size() || text.size() - colon - 1 > 5)
    return false;
  int p = 0;
  for (size_t i = colon + 1; i < text.size(); ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    p = p * 10 + (text[i] - '0');
  }
  if (p < 1 || p > 65535) return false;
  *host = text.substr(0, colon);
  if (host->size() >= 2 && host->front() == '[' && host->back() == ']')
    *host = host->substr(1, host->size() - 2);
  if (host->size() > 255) return false;
  *port = p;
  return true;
}

}  // namespace

void ReplyBudget::Install(redisReader* reader) {
  base_ = reader->fn;
  bounded_.createString = &CreateString;
  bounded_.createArray = &CreateArray;
  bounded_.createInteger = &CreateInteger;
  bounded_.createNil = &CreateNil;
  bounded_.freeObject = &FreeObject;
  reader->fn = &bounded_;
  reader->privdata = this;
}

void ReplyBudget::Reset(uint64_t elements, uint64_t bytes) {
  elements_left_ = elements;
  bytes_left_ = bytes;
  refused_.clear();
}

bool ReplyBudget::Fits(const redisReadTask* task) {
  if (task->parent == nullptr) return true;
  const auto* parent = static_cast<const redisReply*>(task->parent->obj);
  return parent != nullptr && parent->type == REDIS_REPLY_ARRAY && task->idx >= 0 &&
         static_cast<size_t>(task->idx) < parent->elements;
}

void* ReplyBudget::CreateString(const redisReadTask* task, char* str, size_t len) {
  ReplyBudget* b = BudgetOf(task);
  if (len > b->bytes_left_) {
    b->refused_ = "a string of " + std::to_string(len) + " bytes where at most " +
                  std::to_string(b->bytes_left_) + " more were expected";
    return nullptr;
  }
  if (!Fits(task)) return nullptr;
  b->bytes_left_ -= len;
  return b->base_->createString(task, str, len);
}

void* ReplyBudget::CreateArray(const redisReadTask* task, int elements) {
  ReplyBudget* b = BudgetOf(task);
  // The reader checked 0 <= elements <= INT_MAX; the allocation comes now,
  // before a single element arrived: bound it by what is left.
  if (elements < 0 || static_cast<uint64_t>(elements) > b->elements_left_) {
    b->refused_ = "an array of " + std::to_string(elements) + " elements where at most " +
                  std::to_string(b->elements_left_) + " more were expected";
    return nullptr;
  }
  if (!Fits(task)) return nullptr;
  b->elements_left_ -= static_cast<uint64_t>(elements);
  return b->base_->createArray(task, elements);
}

void* ReplyBudget::CreateInteger(const redisReadTask* task, long long value) {
  if (!Fits(task)) return nullptr;
  return BudgetOf(task)->base_->createInteger(task, value);
}

void* ReplyBudget::CreateNil(const redisReadTask* task) {
  if (!Fits(task)) return nullptr;
  return BudgetOf(task)->base_->createNil(task);
}

void ReplyBudget::FreeObject(void* reply) { freeReplyObject(reply); }

Result<std::vector<SlotRange>> ParseClusterSlots(const redisReply* reply) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ARRAY) {
    return Status::Unavailable("CLUSTER SLOTS reply is not an array");
  }
  if (reply->elements > kClusterSlots) {
    return Status::Unavailable("CLUSTER SLOTS reply has " + std::to_string(reply->elements) +
                               " ranges, more than the " + std::to_string(kClusterSlots) +
                               " slots");
  }
  std::vector<SlotRange> ranges;
  for (size_t i = 0; i < reply->elements; ++i) {
    const std::string where = "CLUSTER SLOTS range " + std::to_string(i) + ": ";
    const redisReply* range = reply->element[i];
    if (range == nullptr || range->type != REDIS_REPLY_ARRAY || range->elements < 3) {
      return Status::Unavailable(where + "not an array of at least 3 elements");
    }
    const redisReply* first = range->element[0];
    const redisReply* last = range->element[1];
    if (!IsInteger(first) || !IsInteger(last)) {
      return Status::Unavailable(where + "its first and last slots are not integers");
    }
    if (first->integer < 0 || first->integer > last->integer || last->integer >= kClusterSlots) {
      return Status::Unavailable(where + "slots [" + std::to_string(first->integer) + ", " +
                                 std::to_string(last->integer) + "] are not within [0, " +
                                 std::to_string(kClusterSlots - 1) + "]");
    }
    const redisReply* master = range->element[2];
    if (master == nullptr || master->type != REDIS_REPLY_ARRAY || master->elements < 2) {
      return Status::Unavailable(where + "its server is not an array of host and port");
    }
    const redisReply* host = master->element[0];
    const redisReply* port = master->element[1];
    if (host == nullptr || (host->type != REDIS_REPLY_STRING && host->type != REDIS_REPLY_NIL) ||
        (host->type == REDIS_REPLY_STRING && host->len > 255)) {
      return Status::Unavailable(where + "its host is not a string of at most 255 bytes");
    }
    if (!IsInteger(port) || port->integer < 1 || port->integer > 65535) {
      return Status::Unavailable(where + "its port is not an integer in [1, 65535]");
    }
    SlotRange r;
    r.first = static_cast<int>(first->integer);
    r.last = static_cast<int>(last->integer);
    if (host->type == REDIS_REPLY_STRING) r.host.assign(host->str, host->len);
    if (r.host == "?") r.host.clear();
    if (r.host.find('\0') != std::string::npos) {
      return Status::Unavailable(where + "its host holds a NUL byte");
    }
    r.port = static_cast<int>(port->integer);
    ranges.push_back(std::move(r));
  }
  return ranges;
}

bool ParseRedirect(const redisReply* reply, Redirect* out) {
  if (reply == nullptr || reply->type != REDIS_REPLY_ERROR || reply->str == nullptr) return false;
  const std::string text(reply->str, reply->len);
  // "MOVED 3999 127.0.0.1:6381": three words.
  const size_t space1 = text.find(' ');
  if (space1 == std::string::npos) return false;
  const std::string kind = text.substr(0, space1);
  if (kind != "MOVED" && kind != "ASK") return false;
  const size_t space2 = text.find(' ', space1 + 1);
  if (space2 == std::string::npos || space2 == space1 + 1 || space2 - space1 - 1 > 5) return false;
  int slot = 0;
  for (size_t i = space1 + 1; i < space2; ++i) {
    if (text[i] < '0' || text[i] > '9') return false;
    slot = slot * 10 + (text[i] - '0');
  }
  if (slot >= kClusterSlots) return false;
  Redirect r;
  if (!SplitHostPort(text.substr(space2 + 1), &r.host, &r.port)) return false;
  if (r.host.find_first_of(std::string(" \0", 2)) != std::string::npos) return false;
  r.moved = kind == "MOVED";
  r.slot = slot;
  *out = std::move(r);
  return true;
}

std::string ReplyText(const redisReply* reply) {
  if (reply == nullptr) return "no reply";
  if (reply->type == REDIS_REPLY_ERROR || reply->type == REDIS_REPLY_STATUS) {
    if (reply->str == nullptr) return "";
    return std::string(reply->str, std::min<size_t>(reply->len, 200));
  }
  return "a reply of type " + std::to_string(reply->type);
}

}  // namespace kvstash::tiers::internal
