// kvstash::Client against a fake ROUTER driven by the test thread: the Hello
// handshake, request-id matching with many requests in flight, timeouts,
// malformed replies, lost connections and daemon restarts. No daemon needed.
#include "kvstash/client.h"

#include <gtest/gtest.h>

#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstdio>
#include <future>
#include <memory>
#include <mutex>

#include "fake_router.h"

namespace kvstash::testing {
namespace {

using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;

constexpr std::array<uint8_t, 16> kBoot1 = {1, 1, 1};
constexpr std::array<uint8_t, 16> kBoot2 = {2, 2, 2};

// daemon_pid: the daemon process the Hello names (0: none).
std::unique_ptr<Client> ConnectTo(FakeRouter& router, milliseconds timeout = milliseconds(3000),
                                  uint32_t max_chunks = 1024, LogSink log = nullptr,
                                  uint32_t daemon_pid = 0) {
  ClientOptions options;
  options.socket = router.endpoint();
  options.request_timeout = timeout;
  options.log = std::move(log);
  auto connecting = std::async(std::launch::async, [options] { return Client::Connect(options); });
  EXPECT_TRUE(router.AnswerHello(kBoot1, max_chunks, daemon_pid));
  auto client = connecting.get();
  EXPECT_TRUE(client.ok()) << client.status().ToString();
  return client.ok() ? std::move(client.value()) : nullptr;
}

std::vector<ChunkBlocks> DummyChunks(size_t n) {
  std::vector<ChunkBlocks> chunks(n);
  for (size_t i = 0; i < n; ++i) {
    chunks[i].key[0] = uint8_t(i);
    chunks[i].num_tokens = 256;
    chunks[i].block_ids = {uint32_t(i)};
  }
  return chunks;
}

// Registers a minimal registration (model, one host allocation, one layer)
// that `router` answers with daemon id `id`, holding no copy fence.
bool RegisterUnfenced(Client& client, FakeRouter& router, uint64_t id) {
  RegisterOptions options;
  options.model = "m";
  options.allocations.push_back(HostShm{"/kvstash-fake", 4096});
  options.layers.push_back(LayerDesc{});
  auto registering = client.RegisterKV(options);
  std::optional<Received> request = router.Receive();
  if (!request) return false;
  router.Reply(*request, RegisterKVReply(request->request_id(), id, /*fenced=*/false));
  return registering.get().ok();
}

template <typename T>
bool ReadyWithin(std::future<T>& future, milliseconds timeout = milliseconds(3000)) {
  return future.wait_for(timeout) == std::future_status::ready;
}

TEST(Client, ConnectKeepsTheServerInfoOfItsHello) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(3000), 1024, nullptr, 4242);
  ASSERT_NE(client, nullptr);
  const ServerInfo info = client->server_info();
  EXPECT_EQ(info.boot_id, kBoot1);
  EXPECT_EQ(info.pid, 4242u);
  EXPECT_EQ(info.chunk_tokens, 256u);
  EXPECT_EQ(info.backend, "host");
  EXPECT_EQ(info.server_version, "fake-0.0");
}

TEST(Client, ConnectRejectsAnotherProtocolVersion) {
  FakeRouter router;
  ClientOptions options;
  options.socket = router.endpoint();
  auto connecting = std::async(std::launch::async, [options] { return Client::Connect(options); });
  auto hello = router.Receive();
  ASSERT_TRUE(hello);
  router.Reply(*hello, HelloReply(hello->request_id(), kBoot1, proto::kProtocolVersion + 1));
  auto client = connecting.get();
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnsupportedVersion);
  EXPECT_NE(client.status().message().find("protocol version"), std::string::npos);
}

TEST(Client, ConnectFailsWithUnavailableWhenNoDaemonListens) {
  ClientOptions options;
  options.socket = UniqueIpcEndpoint();           // nobody binds it
  options.request_timeout = milliseconds(10000);  // not spent: it fails at once
  const auto start = Clock::now();
  auto client = Client::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status().ToString();
  EXPECT_NE(client.status().message().find("is it running"), std::string::npos);
  EXPECT_NE(client.status().message().find(options.socket), std::string::npos);
  EXPECT_LT(Clock::now() - start, milliseconds(1000));
}

TEST(Client, ConnectRejectsABadEndpoint) {
  ClientOptions options;
  options.socket = "nonsense://x";
  auto client = Client::Connect(options);
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kInvalidArgument);
}

TEST(Client, RequestWithoutReplyTimesOutAtItsDeadline) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(300));
  ASSERT_NE(client, nullptr);
  const auto start = Clock::now();
  auto ping = client->Ping();
  ASSERT_TRUE(router.Receive());  // received, never answered
  ASSERT_TRUE(ReadyWithin(ping));
  const auto elapsed = Clock::now() - start;
  Result<uint64_t> result = ping.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kTimedOut);
  EXPECT_NE(result.status().message().find("(Ping) got no reply"), std::string::npos)
      << result.status().message();
  EXPECT_NE(result.status().message().find("within 300 ms"), std::string::npos);
  EXPECT_GE(elapsed, milliseconds(290));
  EXPECT_LT(elapsed, milliseconds(1500));
}

TEST(Client, MatchesOutOfOrderRepliesToTheirRequests) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  std::vector<std::future<Result<std::vector<ChunkOutcome>>>> stores;
  for (size_t n = 1; n <= 3; ++n) stores.push_back(client->Store(7, DummyChunks(n)));
  auto ping = client->Ping();
  std::vector<Received> requests;
  for (int i = 0; i < 4; ++i) {
    auto request = router.Receive();
    ASSERT_TRUE(request);
    requests.push_back(std::move(*request));
  }
  // Answer newest first; each store's outcomes carry its own chunk count.
  for (auto it = requests.rbegin(); it != requests.rend(); ++it) {
    if (it->type() == wire::Body::PingRequest) {
      router.Reply(*it, PingReply(it->request_id(), 4242));
      continue;
    }
    const size_t n = ChunkCount(*it);
    std::vector<std::pair<ChunkResult, uint32_t>> outcomes;
    for (size_t i = 0; i < n; ++i)
      outcomes.emplace_back(ChunkResult::kStored, uint32_t(100 * n + i));
    router.Reply(*it, StoreReply(it->request_id(), outcomes));
  }
  for (size_t n = 1; n <= 3; ++n) {
    auto outcomes = stores[n - 1].get();
    ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
    ASSERT_EQ(outcomes->size(), n);
    for (size_t i = 0; i < n; ++i) EXPECT_EQ((*outcomes)[i].num_tokens, 100 * n + i);
  }
  auto uptime = ping.get();
  ASSERT_TRUE(uptime.ok());
  EXPECT_EQ(*uptime, 4242u);
}

// An engine's own table of chunks, read in place through ChunkList: the
// request carries its keys, token counts and block ids as a vector of
// ChunkBlocks would.
TEST(Client, StoreReadsTheCallersTableInPlace) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  struct EngineChunk {
    uint8_t key[32];
    const uint32_t* ids;
    uint32_t count;
    uint32_t tokens;
  };
  const uint32_t table[] = {7, 8, 9, 11, 12};
  EngineChunk engine[3] = {{{1}, table, 3, 40}, {{2}, table + 3, 1, 16}, {{3}, table + 4, 1, 1}};
  const ChunkList list(engine, 3, [](const void* chunks, size_t i) {
    const EngineChunk& c = static_cast<const EngineChunk*>(chunks)[i];
    return ChunkRef{c.key, c.tokens, c.ids, c.count};
  });
  auto stored = client->Store(7, list);
  auto request = router.Receive();
  ASSERT_TRUE(request);
  const auto* store = request->envelope().body_as_StoreRequest();
  ASSERT_NE(store, nullptr);
  ASSERT_EQ(store->chunks()->size(), 3u);
  const std::vector<std::vector<uint32_t>> ids = {{7, 8, 9}, {11}, {12}};
  const uint32_t tokens[] = {40, 16, 1};
  for (size_t i = 0; i < 3; ++i) {
    const wire::ChunkBlocks* chunk = store->chunks()->Get(i);
    EXPECT_EQ(proto::FromWire(*chunk->key())[0], uint8_t(i + 1));
    EXPECT_EQ(chunk->num_tokens(), tokens[i]);
    ASSERT_NE(chunk->block_ids(), nullptr);
    EXPECT_EQ(std::vector<uint32_t>(chunk->block_ids()->begin(), chunk->block_ids()->end()),
              ids[i]);
  }
  router.Reply(*request, StoreReply(request->request_id(), {{ChunkResult::kStored, 40},
                                                            {ChunkResult::kStored, 16},
                                                            {ChunkResult::kStored, 1}}));
  auto outcomes = stored.get();
  ASSERT_TRUE(outcomes.ok()) << outcomes.status().ToString();
  EXPECT_EQ(outcomes->size(), 3u);
}

TEST(Client, ReplyOfTheWrongTypeFailsItsRequest) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto store = client->Store(7, DummyChunks(1));
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, PingReply(request->request_id(), 1));
  auto result = store.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find(
                "expected a StoreReply but kvstashd answered with a PingReply"),
            std::string::npos)
      << result.status().message();
}

TEST(Client, ReplyWithAnotherChunkCountIsMalformed) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto store = client->Store(7, DummyChunks(3));
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, StoreReply(request->request_id(), {{ChunkResult::kStored, 256}}));
  auto result = store.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find("1 chunk outcomes for 3 chunks"), std::string::npos);
}

TEST(Client, UnverifiableReplyWithReadableIdFailsOnlyItsRequest) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto store = client->Store(7, DummyChunks(1));
  auto request = router.Receive();
  ASSERT_TRUE(request);
  auto ping = client->Ping();
  auto ping_request = router.Receive();
  ASSERT_TRUE(ping_request);
  // A PingReply table labelled StoreReply: its uptime reads as a wild offset.
  flatbuffers::FlatBufferBuilder fbb;
  auto body = wire::CreatePingReply(fbb, 0x7ffffff0u);
  router.Reply(*request,
               proto::Finish(fbb, request->request_id(), wire::Body::StoreReply, body.Union()));
  auto result = store.get();
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find("(Store) is unusable"), std::string::npos)
      << result.status().message();
  // The other request is untouched and still gets its reply.
  EXPECT_EQ(ping.wait_for(milliseconds(50)), std::future_status::timeout);
  router.Reply(*ping_request, PingReply(ping_request->request_id(), 5));
  EXPECT_TRUE(ping.get().ok());
}

TEST(Client, UnreadableReplyFailsTheRequestsInFlight) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(5000));
  ASSERT_NE(client, nullptr);
  auto ping = client->Ping();
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, proto::Bytes{'n', 'o', 't', ' ', 'k', 'v', 's', 't', 'a', 's', 'h'});
  ASSERT_TRUE(ReadyWithin(ping, milliseconds(2000)));  // at once, not at the deadline
  auto result = ping.get();
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find("naming no known request"), std::string::npos)
      << result.status().message();
}

TEST(Client, MultiFrameReplyFailsTheRequestsInFlight) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto ping = client->Ping();
  auto request = router.Receive();
  ASSERT_TRUE(request);
  const proto::Bytes reply = PingReply(request->request_id(), 1);
  router.Send(request->peer, {reply, reply});
  auto result = ping.get();
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find("multi-frame"), std::string::npos);
}

TEST(Client, ErrorReplyBecomesTheRequestsStatus) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto store = client->Store(7, DummyChunks(1));
  auto request = router.Receive();
  ASSERT_TRUE(request);
  const Status error = Status::OutOfRange("block id 5000 out of range [0, 4096) for layer 3");
  router.Reply(*request, proto::ErrorMessage(request->request_id(), error));
  auto result = store.get();
  EXPECT_EQ(result.status().code(), StatusCode::kOutOfRange);
  EXPECT_EQ(result.status().message(), error.message());
}

TEST(Client, ErrorReplyWithoutRequestIdFailsTheRequestsInFlight) {
  FakeRouter router;
  auto client = ConnectTo(router);
  ASSERT_NE(client, nullptr);
  auto ping = client->Ping();
  auto request = router.Receive();
  ASSERT_TRUE(request);
  router.Reply(*request, proto::ErrorMessage(0, Status::Malformed("message failed verification")));
  auto result = ping.get();
  EXPECT_EQ(result.status().code(), StatusCode::kMalformedMessage);
  EXPECT_NE(result.status().message().find("could not read a request"), std::string::npos);
}

TEST(Client, TooManyChunksFailLocallyWithTooLarge) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(3000), /*max_chunks=*/2);
  ASSERT_NE(client, nullptr);
  auto result = client->Store(7, DummyChunks(3)).get();
  EXPECT_EQ(result.status().code(), StatusCode::kTooLarge);
  EXPECT_FALSE(router.Receive(milliseconds(100)));  // nothing was sent
}

TEST(Client, DestructionCancelsPendingRequests) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(60000));
  ASSERT_NE(client, nullptr);
  auto ping = client->Ping();
  ASSERT_TRUE(router.Receive());
  client.reset();
  ASSERT_TRUE(ReadyWithin(ping, milliseconds(0)));
  EXPECT_EQ(ping.get().status().code(), StatusCode::kCancelled);
}

// Without a copy fence the client cannot know when a lost daemon stops
// writing: a sent Store is failed only at its deadline, after which kvstashd
// starts no copy unit of it (docs/protocol.md "The copy fence").
TEST(Client, WithoutACopyFenceALostDaemonsStoreFailsAtItsDeadline) {
  auto router = std::make_unique<FakeRouter>();
  auto client = ConnectTo(*router, milliseconds(1500));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(RegisterUnfenced(*client, *router, 7));
  const auto sent = Clock::now();
  auto in_flight = client->Store(7, DummyChunks(1));
  ASSERT_TRUE(router->Receive());
  router.reset();  // the connection is lost, the daemon maybe not
  EXPECT_FALSE(ReadyWithin(in_flight, milliseconds(700))) << "failed before kvstashd could stop";
  ASSERT_TRUE(ReadyWithin(in_flight, milliseconds(3000)));
  EXPECT_GE(Clock::now() - sent, milliseconds(1500));
  EXPECT_EQ(in_flight.get().status().code(), StatusCode::kUnavailable);
}

TEST(Client, LostConnectionFailsRequestsAndRestartRegistersAgainUnderTheSameId) {
  std::mutex log_mutex;
  std::vector<std::string> warnings;
  auto log = [&](LogLevel level, std::string_view text) {
    std::lock_guard<std::mutex> lock(log_mutex);
    if (level == LogLevel::kWarn) warnings.emplace_back(text);
  };
  auto first = std::make_unique<FakeRouter>();
  const std::string endpoint = first->endpoint();
  // This process stands in for the first daemon's process.
  auto client = ConnectTo(*first, milliseconds(5000), 1024, log, uint32_t(getpid()));
  ASSERT_NE(client, nullptr);

  // Register (reply id 7) in the first boot.
  // Well-formed enough to pass the daemon-side message checks the fake
  // router runs (a model, an allocation, a layer).
  RegisterOptions options;
  options.model = "m";
  options.allocations.push_back(HostShm{"/kvstash-fake", 4096});
  options.layers.push_back(LayerDesc{});
  auto registering = client->RegisterKV(options);
  auto request = first->Receive();
  ASSERT_TRUE(request);
  std::optional<DaemonFenceHold> fence = DaemonFenceHold::Open(FenceName(*request));
  ASSERT_TRUE(fence) << "no copy fence to hold";
  first->Reply(*request, RegisterKVReply(request->request_id(), 7));
  auto reg = registering.get();
  ASSERT_TRUE(reg.ok()) << reg.status().ToString();
  EXPECT_EQ(reg->id, 7u);
  EXPECT_EQ(reg->groups.size(), 1u);

  // The connection is lost with a store in flight that the daemon, whose
  // process is alive (it holds its byte of the fence), is not copying: it
  // fails at once, not at its deadline.
  auto in_flight = client->Store(7, DummyChunks(1));
  ASSERT_TRUE(first->Receive());
  first.reset();
  ASSERT_TRUE(ReadyWithin(in_flight, milliseconds(2000)));
  EXPECT_EQ(in_flight.get().status().code(), StatusCode::kUnavailable);

  // While it is away, requests fail at once instead of waiting out their
  // deadline (5 s here).
  const auto away = Clock::now();
  auto while_away = client->Store(7, DummyChunks(1));
  ASSERT_TRUE(ReadyWithin(while_away, milliseconds(1000)));
  EXPECT_EQ(while_away.get().status().code(), StatusCode::kUnavailable);
  EXPECT_LT(Clock::now() - away, milliseconds(1000));

  // A new daemon (new boot id) comes up: the client says Hello, registers
  // the registration again by itself before anything else, and maps the
  // engine's id 7 to the daemon's new id 9.
  FakeRouter second(endpoint);
  auto hello = second.Receive();
  ASSERT_TRUE(hello);
  ASSERT_EQ(hello->type(), wire::Body::HelloRequest);
  auto store = client->Store(7, DummyChunks(1));  // waits for the registration
  second.Reply(*hello, HelloReply(hello->request_id(), kBoot2));
  // One more while it registers again: it waits too (and starts no second Hello).
  auto store_during = client->Store(7, DummyChunks(1));
  auto again = second.Receive();
  ASSERT_TRUE(again);
  ASSERT_EQ(again->type(), wire::Body::RegisterKVRequest);
  second.Reply(*again, RegisterKVReply(again->request_id(), 9));
  auto sent = second.Receive();
  ASSERT_TRUE(sent);
  ASSERT_EQ(sent->type(), wire::Body::StoreRequest);
  EXPECT_EQ(sent->envelope().body_as_StoreRequest()->registration_id(), 9u);
  second.Reply(*sent, StoreReply(sent->request_id(), {{ChunkResult::kStored, 256}}));
  auto sent_during = second.Receive();
  ASSERT_TRUE(sent_during);
  ASSERT_EQ(sent_during->type(), wire::Body::StoreRequest);
  EXPECT_EQ(sent_during->envelope().body_as_StoreRequest()->registration_id(), 9u);
  second.Reply(*sent_during, StoreReply(sent_during->request_id(), {{ChunkResult::kStored, 256}}));
  EXPECT_TRUE(store_during.get().ok());
  auto stored = store.get();
  ASSERT_TRUE(stored.ok()) << stored.status().ToString();
  EXPECT_EQ((*stored)[0].result, ChunkResult::kStored);
  EXPECT_EQ(client->server_info().boot_id, kBoot2);
  EXPECT_EQ(client->server_info().restarts, 1u);

  std::lock_guard<std::mutex> lock(log_mutex);
  bool logged_restart = false;
  for (const auto& warning : warnings)
    logged_restart |= warning.find("restarted") != std::string::npos;
  EXPECT_TRUE(logged_restart);
}

// A restarted kvstashd may take longer than a request's timeout to open the
// engine's memory again: the registration is sent again until it is taken,
// and one the daemon made after its request timed out is unregistered.
TEST(Client, ARegistrationMadeAgainIsRetriedAndALateOneUndone) {
  auto first = std::make_unique<FakeRouter>();
  const std::string endpoint = first->endpoint();
  auto client = ConnectTo(*first, milliseconds(400));
  ASSERT_NE(client, nullptr);
  ASSERT_TRUE(RegisterUnfenced(*client, *first, 7));
  first.reset();

  FakeRouter second(endpoint);
  auto hello = second.Receive();
  ASSERT_TRUE(hello);
  ASSERT_EQ(hello->type(), wire::Body::HelloRequest);
  second.Reply(*hello, HelloReply(hello->request_id(), kBoot2));
  // The next message of a type: keep-alive pings are left unanswered.
  auto next = [&](wire::Body type) -> std::optional<Received> {
    for (;;) {
      std::optional<Received> got = second.Receive(milliseconds(5000));
      if (!got || got->type() == type) return got;
    }
  };
  auto slow = next(wire::Body::RegisterKVRequest);
  ASSERT_TRUE(slow);  // left unanswered past the client's 400 ms
  auto retried = next(wire::Body::RegisterKVRequest);
  ASSERT_TRUE(retried) << "the registration was not sent again";
  EXPECT_NE(retried->request_id(), slow->request_id());
  // The slow one's reply comes after all: its registration is given back.
  second.Reply(*slow, RegisterKVReply(slow->request_id(), 8, /*fenced=*/false));
  auto undo = next(wire::Body::UnregisterKVRequest);
  ASSERT_TRUE(undo) << "the late registration was not unregistered";
  EXPECT_EQ(undo->envelope().body_as_UnregisterKVRequest()->registration_id(), 8u);
  second.Reply(*retried, RegisterKVReply(retried->request_id(), 9, /*fenced=*/false));
  // The engine's id 7 now means the daemon's 9 (a store sent before the
  // reply was read may still fail: send until one goes out).
  std::optional<Received> sent;
  for (int i = 0; i < 20 && !sent; ++i) {
    auto store = client->Store(7, DummyChunks(1));
    sent = second.Receive(milliseconds(200));
    while (sent && sent->type() != wire::Body::StoreRequest)
      sent = second.Receive(milliseconds(200));
    if (sent) second.Reply(*sent, StoreReply(sent->request_id(), {{ChunkResult::kStored, 256}}));
    store.wait();
  }
  ASSERT_TRUE(sent);
  EXPECT_EQ(sent->envelope().body_as_StoreRequest()->registration_id(), 9u);
}

TEST(Client, GoodbyeFailsPendingRequestsAtOnce) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(10000));
  ASSERT_NE(client, nullptr);
  auto pending = client->Ping();
  auto request = router.Receive();
  ASSERT_TRUE(request);
  flatbuffers::FlatBufferBuilder fbb(64);
  auto body = wire::CreateGoodbyeDirect(fbb, "kvstashd is stopping");
  const auto start = Clock::now();
  router.Send(request->peer, {proto::Finish(fbb, 0, wire::Body::Goodbye, body.Union())});
  ASSERT_TRUE(ReadyWithin(pending, milliseconds(1000)));
  const Status status = pending.get().status();
  EXPECT_EQ(status.code(), StatusCode::kUnavailable) << status.ToString();
  EXPECT_NE(status.message().find("stopping"), std::string::npos) << status.ToString();
  EXPECT_LT(Clock::now() - start, milliseconds(500));
  // Until the connection is back, requests fail at once too.
  auto after = client->Ping();
  ASSERT_TRUE(ReadyWithin(after, milliseconds(500)));
  EXPECT_EQ(after.get().status().code(), StatusCode::kUnavailable);
}

TEST(Client, EveryRequestCarriesItsDeadline) {
  FakeRouter router;
  auto client = ConnectTo(router, milliseconds(3000));
  ASSERT_NE(client, nullptr);
  const auto before =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch());
  auto ping = client->Ping();
  auto request = router.Receive();
  ASSERT_TRUE(request);
  const auto after =
      std::chrono::duration_cast<std::chrono::nanoseconds>(Clock::now().time_since_epoch());
  const uint64_t deadline = request->envelope().deadline_ns();
  EXPECT_GE(deadline, uint64_t((before + milliseconds(3000)).count()));
  EXPECT_LE(deadline, uint64_t((after + milliseconds(3000)).count()));
  router.Reply(*request, PingReply(request->request_id(), 1));
  EXPECT_TRUE(ping.get().ok());
}

TEST(Client, ConnectFailsFastOnAStaleSocketFile) {
  const std::string endpoint = UniqueIpcEndpoint();
  const std::string path = endpoint.substr(6);
  {
    // Bound and closed: the file stays, nobody listens.
    const int fd = ::socket(AF_UNIX, SOCK_STREAM, 0);
    sockaddr_un address{};
    address.sun_family = AF_UNIX;
    std::snprintf(address.sun_path, sizeof(address.sun_path), "%s", path.c_str());
    ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&address), sizeof(address)), 0);
    ::close(fd);
  }
  ClientOptions options;
  options.socket = path;  // a plain path
  options.request_timeout = milliseconds(10000);
  const auto start = Clock::now();
  auto client = Client::Connect(options);
  const auto took = Clock::now() - start;
  ::unlink(path.c_str());
  ASSERT_FALSE(client.ok());
  EXPECT_EQ(client.status().code(), StatusCode::kUnavailable) << client.status().ToString();
  EXPECT_NE(client.status().message().find(path), std::string::npos) << client.status().ToString();
  EXPECT_NE(client.status().message().find("stale"), std::string::npos)
      << client.status().ToString();
  EXPECT_LT(took, milliseconds(1000));
}

}  // namespace
}  // namespace kvstash::testing
