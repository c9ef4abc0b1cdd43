// RedisTier: chunks as Redis values (see redis_tier.h for the layout).
#include "kvstash/tiers/redis_tier.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>

#include "batch.h"
#include "kvstash/runtime/work_queue.h"
#include "redis_router.h"

namespace kvstash::tiers {

using internal::Batch;
using internal::RedisCommand;
using internal::RedisItem;

namespace {

using Clock = std::chrono::steady_clock;

// Part 0 is the chunk header alone; its part_bytes says how the payload
// was split, inside the header checksum.
constexpr size_t kPartZeroBytes = kChunkHeaderBytes;
// What a reader accepts as a writer's part size: the bounds Open() puts on
// our own. With at most kMaxParts parts a chunk costs a bounded number of
// commands and replies before its checksum is verified.
constexpr uint64_t kMinPartBytes = 4096;
constexpr uint64_t kMaxPartBytes = 512ull << 20;  // Redis's proto-max-bulk-len default
constexpr uint64_t kMaxParts = 1u << 16;

uint64_t MicrosSince(Clock::time_point start) {
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::microseconds>(Clock::now() - start).count());
}

uint64_t PartsOf(uint64_t payload_bytes, uint64_t part_bytes) {
  return payload_bytes / part_bytes + (payload_bytes % part_bytes != 0 ? 1 : 0);
}

// Why a header's split cannot be read ("" when it can): a part size out of
// bounds, or more parts than any writer makes.
std::string SplitProblem(const ChunkHeader& h) {
  if (h.part_bytes < kMinPartBytes || h.part_bytes > kMaxPartBytes) {
    return "part size " + std::to_string(h.part_bytes) + " out of range [" +
           std::to_string(kMinPartBytes) + ", " + std::to_string(kMaxPartBytes) + "]";
  }
  if (PartsOf(h.payload_bytes, h.part_bytes) > kMaxParts) {
    return std::to_string(h.payload_bytes) + " payload bytes in parts of " +
           std::to_string(h.part_bytes) + " make more than " + std::to_string(kMaxParts) + " parts";
  }
  return "";
}

// Reads a value expected to hold `bytes`: one byte more is asked for, so a
// value too long shows, yet a longer one (another writer's part size) costs
// no more than that, and the reply is bounded to match.
internal::RedisCommand ReadPart(std::string key, uint64_t bytes) {
  internal::RedisCommand get;
  get.args = {"GETRANGE", std::move(key), "0", std::to_string(bytes)};
  get.max_reply_bytes = bytes + 1;
  return get;
}

bool IsString(const internal::Reply& r) { return r && r->type == REDIS_REPLY_STRING; }

std::string ErrorText(const internal::Reply& r) { return internal::ReplyText(r.get()); }

}  // namespace

Result<std::vector<std::string>> ParseRedisServers(const std::string& text) {
  std::vector<std::string> servers;
  size_t start = 0;
  while (start <= text.size()) {
    const size_t comma = std::min(text.find(',', start), text.size());
    const std::string entry = text.substr(start, comma - start);
    std::string host;
    int port = 0;
    if (!internal::SplitEndpoint(entry, &host, &port)) {
      return Status::InvalidArgument("--l3-redis entry '" + entry +
                                     "' is not HOST:PORT with a port in [1, 65535]");
    }
    servers.push_back(entry);
    start = comma + 1;
  }
  return servers;
}

class RedisTier::Impl {
 public:
  explicit Impl(const RedisTierOptions& options)
      : options_(options),
        router_(options_, stats_),
        io_(std::max<uint32_t>(1, options_.io_threads), "kvstash-l3") {}
  // What is queued still runs, for at most one command timeout; then every
  // wait on a server fails at once, so a hung or hostile Redis cannot hold
  // the daemon's exit.
  ~Impl() { router_.StopAt(Clock::now() + std::chrono::milliseconds(options_.command_timeout_ms)); }

  std::string KeyOf(const ChunkId& id, uint32_t part) const {
    return options_.key_prefix + ":{" + ToHex(id.scope.data(), 32) + ToHex(id.key) +
           "}:" + std::to_string(part);
  }
  uint16_t SlotOf(const ChunkId& id) const { return internal::KeySlot(KeyOf(id, 0)); }

  RedisCommand Set(std::string key, const uint8_t* value, size_t bytes) const {
    RedisCommand c;
    c.args = {"SET", std::move(key)};
    c.blob = value;
    c.blob_bytes = bytes;
    c.blob_at = 2;
    if (options_.ttl_s > 0) {
      c.args.push_back("EX");
      c.args.push_back(std::to_string(options_.ttl_s));
    }
    return c;
  }

  // Splits a batch into one job per I/O thread (at least one item each), so
  // that a large batch uses every connection at once.
  template <typename Request, typename Fn>
  void Spread(std::shared_ptr<std::vector<Request>> requests, Fn run) {
    const size_t n = requests->size();
    const size_t jobs = std::min<size_t>(n, io_.threads());
    for (size_t j = 0; j < jobs; ++j) {
      const size_t begin = n * j / jobs;
      const size_t end = n * (j + 1) / jobs;
      io_.Post([this, requests, begin, end, run] {
        auto connections = router_.TakeConnections();
        run(*connections, begin, end);
        router_.ReturnConnections(std::move(connections));
      });
    }
  }

  void PutRange(internal::ConnectionSet& set, const std::vector<PutRequest>& requests, size_t begin,
                size_t end, const std::shared_ptr<Batch<PutResult>>& batch);
  void GetRange(internal::ConnectionSet& set, const std::vector<GetRequest>& requests, size_t begin,
                size_t end, const std::shared_ptr<Batch<GetResult>>& batch);
  // Reads part 0 of each id: its header (with the writer's part size).
  struct Head {
    Status status;  // Ok with present or absent; else the tier failed
    bool present = false;
    ChunkHeader header;
    uint64_t part_bytes = 0;
  };
  std::vector<Head> ReadHeads(internal::ConnectionSet& set, const std::vector<ChunkId>& ids);
  // The commands reading a chunk split in parts of `part_bytes`: part 0,
  // then each part, each reply bounded to the bytes it should hold.
  void ReadParts(const ChunkExpectation& e, uint64_t part_bytes, RedisItem& item) const {
    item.commands.push_back(ReadPart(KeyOf(e.id, 0), kPartZeroBytes));
    const uint64_t parts = PartsOf(e.payload_bytes, part_bytes);
    for (uint64_t p = 0; p < parts; ++p) {
      item.commands.push_back(ReadPart(KeyOf(e.id, static_cast<uint32_t>(p + 1)),
                                       std::min(part_bytes, e.payload_bytes - p * part_bytes)));
    }
  }

  const RedisTierOptions options_;
  const std::string name_ = "l3-redis";
  TierStats stats_;
  std::atomic<uint64_t> pending_put_bytes_{0};
  internal::RedisRouter router_;
  runtime::WorkQueue io_;  // last: its threads stop first
};

void RedisTier::Impl::PutRange(internal::ConnectionSet& set,
                               const std::vector<PutRequest>& requests, size_t begin, size_t end,
                               const std::shared_ptr<Batch<PutResult>>& batch) {
  const auto start = Clock::now();
  std::vector<RedisItem> items(end - begin);
  for (size_t i = begin; i < end; ++i) {
    const PutRequest& r = requests[i];
    RedisItem& item = items[i - begin];
    item.slot = SlotOf(r.id);
    ChunkHeader header;
    header.id = r.id;
    header.layout_fingerprint = r.layout_fingerprint;
    header.num_tokens = r.num_tokens;
    header.part_bytes = static_cast<uint32_t>(options_.part_bytes);
    header.payload_bytes = r.payload_bytes;
    if (const std::string problem = SplitProblem(header); !problem.empty()) {
      item.status = Status::TooLarge("L3 chunk: " + problem);
      continue;
    }
    header.payload_checksum = PayloadChecksum(r.payload, r.payload_bytes);
    // The payload's parts first, part 0 (the header) last: a reader sees
    // the chunk only once every part is there.
    const uint64_t parts = PartsOf(r.payload_bytes, options_.part_bytes);
    for (uint64_t p = 0; p < parts; ++p) {
      const uint64_t offset = p * options_.part_bytes;
      item.commands.push_back(
          Set(KeyOf(r.id, static_cast<uint32_t>(p + 1)), r.payload + offset,
              std::min<uint64_t>(options_.part_bytes, r.payload_bytes - offset)));
    }
    std::string head(kPartZeroBytes, '\0');
    EncodeChunkHeader(header, reinterpret_cast<uint8_t*>(head.data()));
    RedisCommand set_head = Set(KeyOf(r.id, 0), nullptr, 0);
    set_head.blob = nullptr;
    set_head.args.insert(set_head.args.begin() + 2, std::move(head));
    item.commands.push_back(std::move(set_head));
  }
  std::vector<RedisItem*> pointers;
  for (RedisItem& item : items) {
    if (item.status.ok()) pointers.push_back(&item);
  }
  router_.Execute(set, pointers);
  const uint64_t micros = MicrosSince(start);
  for (size_t i = begin; i < end; ++i) {
    RedisItem& item = items[i - begin];
    const uint64_t bytes = requests[i].payload_bytes;
    pending_put_bytes_.fetch_sub(bytes);
    Status status = item.status;
    for (size_t k = 0; status.ok() && k < item.replies.size(); ++k) {
      const internal::Reply& reply = item.replies[k];
      if (!reply || reply->type != REDIS_REPLY_STATUS || ErrorText(reply) != "OK") {
        status = Status::Unavailable("L3 redis SET refused: " + ErrorText(reply));
      }
    }
    if (!status.ok()) {
      TierStats::Add(stats_.put_errors);
      batch->Finish(i, {PutOutcome::kFailed, std::move(status)});
      continue;
    }
    TierStats::Add(stats_.put_chunks);
    TierStats::Add(stats_.put_bytes, bytes);
    stats_.put_latency.Record(micros);
    batch->Finish(i, {PutOutcome::kStored, Status::Ok()});
  }
}

std::vector<RedisTier::Impl::Head> RedisTier::Impl::ReadHeads(internal::ConnectionSet& set,
                                                              const std::vector<ChunkId>& ids) {
  std::vector<RedisItem> items(ids.size());
  std::vector<RedisItem*> pointers;
  for (size_t i = 0; i < ids.size(); ++i) {
    items[i].slot = SlotOf(ids[i]);
    items[i].commands.push_back(ReadPart(KeyOf(ids[i], 0), kPartZeroBytes));
    pointers.push_back(&items[i]);
  }
  router_.Execute(set, pointers);
  std::vector<Head> heads(ids.size());
  for (size_t i = 0; i < ids.size(); ++i) {
    Head& h = heads[i];
    const RedisItem& item = items[i];
    if (!item.status.ok()) {
      h.status = item.status;
      continue;
    }
    const internal::Reply& r = item.replies[0];
    if (!IsString(r)) {
      if (!r || r->type == REDIS_REPLY_ERROR)
        h.status = Status::Unavailable("L3 redis GETRANGE: " + ErrorText(r));
      continue;
    }
    if (r->len == 0) continue;  // GETRANGE of a missing key: ""
    Result<ChunkHeader> header =
        DecodeChunkHeader(reinterpret_cast<const uint8_t*>(r->str), r->len);
    if (!header.ok() || header->id != ids[i] || r->len != kPartZeroBytes ||
        !SplitProblem(*header).empty()) {
      TierStats::Add(stats_.corrupt_chunks);
      continue;
    }
    h.present = true;
    h.header = *header;
    h.part_bytes = header->part_bytes;
  }
  return heads;
}

void RedisTier::Impl::GetRange(internal::ConnectionSet& set,
                               const std::vector<GetRequest>& requests, size_t begin, size_t end,
                               const std::shared_ptr<Batch<GetResult>>& batch) {
  const auto start = Clock::now();
  // One round trip in the usual case: part 0 and the payload's parts at
  // our own part size. A writer with another part size costs a second.
  std::vector<RedisItem> items(end - begin);
  std::vector<RedisItem*> pointers;
  for (size_t i = begin; i < end; ++i) {
    const ChunkExpectation& e = requests[i].expect;
    RedisItem& item = items[i - begin];
    item.slot = SlotOf(e.id);
    ReadParts(e, options_.part_bytes, item);
    pointers.push_back(&item);
  }
  router_.Execute(set, pointers);

  std::vector<size_t> second;  // indices (into items) read again at the writer's part size
  std::vector<uint64_t> writer_part_bytes(items.size(), options_.part_bytes);
  std::vector<Status> outcome(items.size());
  std::vector<ChunkHeader> headers(items.size());
  auto assemble = [&](size_t k) {
    const GetRequest& r = requests[begin + k];
    RedisItem& item = items[k];
    if (!item.status.ok()) return item.status;
    const internal::Reply& head = item.replies[0];
    if (!IsString(head)) return Status::Unavailable("L3 redis GETRANGE: " + ErrorText(head));
    if (head->len == 0)
      return Status::NotFound("chunk " + ToHex(r.expect.id.key) + " is not in L3");
    Result<ChunkHeader> header =
        DecodeChunkHeader(reinterpret_cast<const uint8_t*>(head->str), head->len);
    if (!header.ok() || head->len != kPartZeroBytes) {
      TierStats::Add(stats_.corrupt_chunks);
      return Status::NotFound("L3 chunk " + ToHex(r.expect.id.key) + ": " +
                              (header.ok() ? "part 0 has " + std::to_string(head->len) + " bytes"
                                           : header.status().message()));
    }
    Status check = CheckChunkHeader(*header, r.expect);
    if (!check.ok()) {
      TierStats::Add(stats_.corrupt_chunks);
      return Status::NotFound("L3 chunk: " + check.message());
    }
    // The payload size matched the registration's above; the part size is
    // bounded too before it decides how many parts to read.
    if (const std::string problem = SplitProblem(*header); !problem.empty()) {
      TierStats::Add(stats_.corrupt_chunks);
      return Status::NotFound("L3 chunk " + ToHex(r.expect.id.key) + ": " + problem);
    }
    const uint64_t part_bytes = header->part_bytes;
    const uint64_t parts = PartsOf(header->payload_bytes, part_bytes);
    if (part_bytes != writer_part_bytes[k]) {
      writer_part_bytes[k] = part_bytes;
      return Status::Cancelled("read again");  // marks the second round
    }
    if (item.replies.size() != parts + 1) return Status::Internal("reply count");
    for (uint64_t p = 0; p < parts; ++p) {
      const internal::Reply& part = item.replies[p + 1];
      const uint64_t offset = p * part_bytes;
      const uint64_t want = std::min<uint64_t>(part_bytes, header->payload_bytes - offset);
      if (!IsString(part) || part->len != want) {
        if (part && part->type == REDIS_REPLY_ERROR)
          return Status::Unavailable("L3 redis GETRANGE: " + ErrorText(part));
        TierStats::Add(stats_.corrupt_chunks);
        return Status::NotFound(
            "L3 chunk " + ToHex(r.expect.id.key) + ": part " + std::to_string(p + 1) +
            (IsString(part)
                 ? " has " + std::to_string(part->len) + " bytes, expected " + std::to_string(want)
                 : " is missing"));
      }
      std::memcpy(r.payload + offset, part->str, want);
    }
    Status verified = VerifyChunk(*header, r.expect, r.payload, r.expect.payload_bytes);
    if (!verified.ok()) {
      TierStats::Add(stats_.corrupt_chunks);
      return Status::NotFound("L3 chunk: " + verified.message());
    }
    headers[k] = *header;
    return Status::Ok();
  };
  for (size_t k = 0; k < items.size(); ++k) {
    outcome[k] = assemble(k);
    if (outcome[k].code() == StatusCode::kCancelled) second.push_back(k);
  }
  if (!second.empty()) {
    std::vector<RedisItem*> again;
    for (size_t k : second) {
      RedisItem& item = items[k];
      item.commands.clear();
      item.replies.clear();
      ReadParts(requests[begin + k].expect, writer_part_bytes[k], item);
      again.push_back(&item);
    }
    router_.Execute(set, again);
    for (size_t k : second) {
      outcome[k] = assemble(k);
      if (outcome[k].code() == StatusCode::kCancelled)
        outcome[k] = Status::NotFound("L3 chunk rewritten while read");
    }
  }
  const uint64_t micros = MicrosSince(start);
  for (size_t k = 0; k < items.size(); ++k) {
    const size_t i = begin + k;
    if (outcome[k].ok()) {
      TierStats::Add(stats_.get_hits);
      TierStats::Add(stats_.get_bytes, requests[i].expect.payload_bytes);
      stats_.get_latency.Record(micros);
      batch->Finish(i, {Status::Ok(), headers[k].num_tokens});
    } else {
      TierStats::Add(outcome[k].code() == StatusCode::kNotFound ? stats_.get_misses
                                                                : stats_.get_errors);
      batch->Finish(i, {outcome[k], 0});
    }
  }
}

Result<std::unique_ptr<RedisTier>> RedisTier::Open(const RedisTierOptions& options) {
  if (options.servers.empty()) return Status::InvalidArgument("--l3-redis names no server");
  for (const std::string& server : options.servers) {
    KVSTASH_RETURN_IF_ERROR(ParseRedisServers(server).status());
  }
  if (options.part_bytes < kMinPartBytes || options.part_bytes > kMaxPartBytes) {
    return Status::OutOfRange(
        "L3 part size " + std::to_string(options.part_bytes) +
        " bytes out of range [4096, 536870912] (Redis's proto-max-bulk-len default)");
  }
  if (options.key_prefix.find_first_of("{}") != std::string::npos || options.key_prefix.empty()) {
    return Status::InvalidArgument("L3 key prefix '" + options.key_prefix +
                                   "' must be non-empty without braces");
  }
  return std::unique_ptr<RedisTier>(new RedisTier(std::make_unique<Impl>(options)));
}

RedisTier::RedisTier(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
RedisTier::~RedisTier() = default;

const std::string& RedisTier::name() const { return impl_->name_; }
std::string RedisTier::KeyOf(const ChunkId& id, uint32_t part) const {
  return impl_->KeyOf(id, part);
}
const TierStats& RedisTier::stats() const { return impl_->stats_; }
TierUsage RedisTier::Usage() const { return {}; }

void RedisTier::Put(std::vector<PutRequest> batch, PutDone done) {
  // Writes are best effort: beyond the bound, refuse rather than queue
  // without limit behind a slow Redis.
  uint64_t bytes = 0;
  for (const PutRequest& r : batch) bytes += r.payload_bytes;
  const uint64_t before = impl_->pending_put_bytes_.fetch_add(bytes);
  if (before > 0 && before + bytes > impl_->options_.max_pending_put_bytes) {
    impl_->pending_put_bytes_.fetch_sub(bytes);
    TierStats::Add(impl_->stats_.put_errors, batch.size());
    std::vector<PutResult> refused(batch.size());
    for (PutResult& r : refused) {
      r.status = Status::Exhausted("L3 has " + std::to_string(before) +
                                   " bytes of writes pending, limit " +
                                   std::to_string(impl_->options_.max_pending_put_bytes));
    }
    return done(std::move(refused));
  }
  auto requests = std::make_shared<std::vector<PutRequest>>(std::move(batch));
  auto results = Batch<PutResult>::Make(requests->size(), std::move(done));
  impl_->Spread(requests,
                [this, requests, results](internal::ConnectionSet& set, size_t b, size_t e) {
                  impl_->PutRange(set, *requests, b, e, results);
                });
}

void RedisTier::Get(std::vector<GetRequest> batch, GetDone done) {
  auto requests = std::make_shared<std::vector<GetRequest>>(std::move(batch));
  auto results = Batch<GetResult>::Make(requests->size(), std::move(done));
  impl_->Spread(requests,
                [this, requests, results](internal::ConnectionSet& set, size_t b, size_t e) {
                  impl_->GetRange(set, *requests, b, e, results);
                });
}

void RedisTier::Contains(std::vector<ChunkId> ids, ContainsDone done) {
  TierStats::Add(impl_->stats_.contains_requests, ids.size());
  auto requests = std::make_shared<std::vector<ChunkId>>(std::move(ids));
  auto results = Batch<Presence>::Make(requests->size(), std::move(done));
  impl_->Spread(requests,
                [this, requests, results](internal::ConnectionSet& set, size_t b, size_t e) {
                  std::vector<ChunkId> part(requests->begin() + static_cast<long>(b),
                                            requests->begin() + static_cast<long>(e));
                  std::vector<Impl::Head> heads = impl_->ReadHeads(set, part);
                  for (size_t k = 0; k < heads.size(); ++k) {
                    results->Finish(b + k, {heads[k].status, heads[k].present, heads[k].header});
                  }
                });
}

void RedisTier::Remove(std::vector<ChunkId> ids, RemoveDone done) {
  auto requests = std::make_shared<std::vector<ChunkId>>(std::move(ids));
  auto results = Batch<Status>::Make(requests->size(), std::move(done));
  impl_->Spread(
      requests, [this, requests, results](internal::ConnectionSet& set, size_t b, size_t e) {
        std::vector<ChunkId> part(requests->begin() + static_cast<long>(b),
                                  requests->begin() + static_cast<long>(e));
        std::vector<Impl::Head> heads = impl_->ReadHeads(set, part);
        // One DEL per chunk: its parts share a hash tag, hence a slot.
        std::vector<RedisItem> items(part.size());
        std::vector<RedisItem*> pointers;
        for (size_t k = 0; k < part.size(); ++k) {
          items[k].slot = impl_->SlotOf(part[k]);
          if (!heads[k].status.ok()) {
            items[k].status = heads[k].status;
            continue;
          }
          // Bounded by ReadHeads (SplitProblem) before it decides the DEL.
          const uint64_t parts =
              heads[k].present ? PartsOf(heads[k].header.payload_bytes, heads[k].part_bytes) : 0;
          RedisCommand del;
          del.args = {"DEL"};
          for (uint64_t p = 0; p <= parts; ++p)
            del.args.push_back(impl_->KeyOf(part[k], static_cast<uint32_t>(p)));
          items[k].commands.push_back(std::move(del));
          pointers.push_back(&items[k]);
        }
        impl_->router_.Execute(set, pointers);
        for (size_t k = 0; k < part.size(); ++k) {
          Status status = items[k].status;
          if (status.ok() && !items[k].replies.empty() &&
              (!items[k].replies[0] || items[k].replies[0]->type != REDIS_REPLY_INTEGER)) {
            status = Status::Unavailable("L3 redis DEL: " + ErrorText(items[k].replies[0]));
          }
          if (status.ok()) TierStats::Add(impl_->stats_.removed_chunks);
          results->Finish(b + k, std::move(status));
        }
      });
}

}  // namespace kvstash::tiers
