// L3 against replies no real Redis sends (whoever answers on the Redis port
// can): a CLUSTER SLOTS with slots out of range or fields of the wrong type,
// an array announcing 2^31 elements, a string that never ends. Each is
// refused with an error that says what was wrong; none crashes, spins or
// holds the tier's shutdown.
#include <gtest/gtest.h>

#include <chrono>
#include <future>

#include "kvstash/tiers/redis_tier.h"
#include "resp_peer.h"
#include "tier_test_data.h"

namespace kvstash::tiers {
namespace {

using testing::MakeId;
using testing::RespArrayHeader;
using testing::RespBulk;
using testing::RespError;
using testing::RespInteger;
using testing::RespPeer;
using Clock = std::chrono::steady_clock;

RedisTierOptions Options(const RespPeer& peer) {
  RedisTierOptions o;
  o.servers = {peer.endpoint()};
  o.connect_timeout_ms = 300;
  o.command_timeout_ms = 1000;
  o.io_threads = 2;
  return o;
}

// A CLUSTER SLOTS reply of one range [first, last] on the peer itself.
std::string OneRange(const std::string& first, const std::string& last, int port) {
  return RespArrayHeader(1) + RespArrayHeader(3) + first + last + RespArrayHeader(2) +
         RespBulk("127.0.0.1") + RespInteger(port);
}

// A peer that answers CLUSTER SLOTS with `slots` and GETRANGE with "" (absent).
std::unique_ptr<RespPeer> ClusterPeer(std::function<std::string(int port)> slots) {
  auto port = std::make_shared<int>(0);
  auto peer = RespPeer::Start([slots, port](const std::vector<std::string>& c) {
    if (c.size() == 2 && c[0] == "CLUSTER") return RespPeer::Answer{slots(*port), nullptr};
    return RespPeer::Answer{RespBulk(""), nullptr};
  });
  *port = peer->port();
  return peer;
}

Result<std::vector<Presence>> ContainsWithin(Tier& tier, std::chrono::seconds limit) {
  auto answer = ContainsAsync(tier, {MakeId(1, 1), MakeId(1, 2)});
  if (answer.wait_for(limit) != std::future_status::ready) {
    return Status::TimedOut("no answer within " + std::to_string(limit.count()) + " s");
  }
  return answer.get();
}

TEST(RedisReplies, ClusterSlotsOutOfRangeOrOfTheWrongShapeIsRefusedNotUsed) {
  struct Case {
    const char* what;
    std::function<std::string(int)> slots;
  };
  const std::vector<Case> cases = {
      {"a far negative slot",
       [](int port) { return OneRange(RespInteger(-100000000), RespInteger(5), port); }},
      {"a slightly negative slot",
       [](int port) { return OneRange(RespInteger(-4), RespInteger(-1), port); }},
      {"a slot past 16383",
       [](int port) { return OneRange(RespInteger(16000), RespInteger(70000), port); }},
      {"slots that are strings",
       [](int port) { return OneRange(RespBulk("0"), RespBulk("16383"), port); }},
      {"a range of one element",
       [](int) { return RespArrayHeader(1) + RespArrayHeader(1) + RespInteger(0); }},
      {"a port out of range",
       [](int) {
         return RespArrayHeader(1) + RespArrayHeader(3) + RespInteger(0) + RespInteger(16383) +
                RespArrayHeader(2) + RespBulk("127.0.0.1") + RespInteger(70000);
       }},
      {"a server that is an integer",
       [](int) {
         return RespArrayHeader(1) + RespArrayHeader(3) + RespInteger(0) + RespInteger(16383) +
                RespInteger(7);
       }},
  };
  for (const Case& c : cases) {
    auto peer = ClusterPeer(c.slots);
    ASSERT_TRUE(peer) << c.what;
    Result<std::unique_ptr<RedisTier>> tier = RedisTier::Open(Options(*peer));
    ASSERT_TRUE(tier.ok()) << tier.status().ToString();
    Result<std::vector<Presence>> present = ContainsWithin(**tier, std::chrono::seconds(10));
    ASSERT_TRUE(present.ok()) << c.what << ": " << present.status().ToString();
    for (const Presence& p : *present) {
      EXPECT_FALSE(p.status.ok()) << c.what << ": the map was used";
      EXPECT_EQ(p.status.code(), StatusCode::kUnavailable) << p.status.ToString();
      EXPECT_NE(p.status.message().find("CLUSTER SLOTS"), std::string::npos)
          << c.what << ": " << p.status.message();
    }
  }
  // The same peer with a sound map is used.
  auto peer =
      ClusterPeer([](int port) { return OneRange(RespInteger(0), RespInteger(16383), port); });
  Result<std::unique_ptr<RedisTier>> tier = RedisTier::Open(Options(*peer));
  ASSERT_TRUE(tier.ok());
  Result<std::vector<Presence>> present = ContainsWithin(**tier, std::chrono::seconds(10));
  ASSERT_TRUE(present.ok()) << present.status().ToString();
  for (const Presence& p : *present) {
    EXPECT_TRUE(p.status.ok()) << p.status.ToString();
    EXPECT_FALSE(p.present);
  }
}

// A peer that is no cluster, and answers every other command with `reply`
// (then keeps sending `more` while the connection lasts).
std::unique_ptr<RespPeer> StandalonePeer(std::string reply, std::string more) {
  return RespPeer::Start([reply, more](const std::vector<std::string>& c) {
    if (c.size() == 2 && c[0] == "CLUSTER") {
      return RespPeer::Answer{RespError("ERR This instance has cluster support disabled"), nullptr};
    }
    std::function<std::string()> keep_sending;
    if (!more.empty()) keep_sending = [more] { return more; };
    return RespPeer::Answer{reply, keep_sending};
  });
}

TEST(RedisReplies, AHugeArrayOrEndlessStringIsRefusedAndTheTierStopsPromptly) {
  struct Case {
    const char* what;
    std::string reply;
    std::string more;
  };
  std::string integers;
  for (int i = 0; i < 4096; ++i) integers += RespInteger(1);
  const std::vector<Case> cases = {
      {"an array of 2^31 - 1 elements, never sent", RespArrayHeader(2147483647), ""},
      {"an array of 2^31 - 1 elements, sent forever", RespArrayHeader(2147483647), integers},
      {"nested arrays of 2^20 elements each", RespArrayHeader(1 << 20) + RespArrayHeader(1 << 20),
       ""},
      {"a string of 1 GiB, sent forever", "$1073741824\r\n", std::string(1 << 16, 'x')},
  };
  for (const Case& c : cases) {
    auto peer = StandalonePeer(c.reply, c.more);
    ASSERT_TRUE(peer);
    const auto start = Clock::now();
    {
      Result<std::unique_ptr<RedisTier>> tier = RedisTier::Open(Options(*peer));
      ASSERT_TRUE(tier.ok());
      Result<std::vector<Presence>> present = ContainsWithin(**tier, std::chrono::seconds(10));
      ASSERT_TRUE(present.ok()) << c.what << ": " << present.status().ToString();
      for (const Presence& p : *present) {
        EXPECT_FALSE(p.status.ok()) << c.what;
        EXPECT_FALSE(p.present) << c.what;
      }
      // Another call still queued when the tier goes: it ends within the
      // command timeout, not after the peer is done.
      (void)ContainsAsync(**tier, {MakeId(2, 1)});
    }
    const double seconds = std::chrono::duration<double>(Clock::now() - start).count();
    EXPECT_LT(seconds, 5.0) << c.what;
  }
}

TEST(RedisReplies, AReplyOfTheWrongTypeIsAFailureNotASuccess) {
  // SET answered with an integer, DEL with a status, GETRANGE with an array.
  auto peer = RespPeer::Start([](const std::vector<std::string>& c) {
    if (c.size() == 2 && c[0] == "CLUSTER") {
      return RespPeer::Answer{RespError("ERR This instance has cluster support disabled"), nullptr};
    }
    if (c[0] == "SET") return RespPeer::Answer{RespInteger(1), nullptr};
    if (c[0] == "DEL") return RespPeer::Answer{"+OK\r\n", nullptr};
    if (c[0] == "GETRANGE" && c[1].back() == '0') return RespPeer::Answer{RespBulk(""), nullptr};
    return RespPeer::Answer{RespArrayHeader(1) + RespInteger(1), nullptr};
  });
  ASSERT_TRUE(peer);
  Result<std::unique_ptr<RedisTier>> tier = RedisTier::Open(Options(*peer));
  ASSERT_TRUE(tier.ok());
  std::vector<uint8_t> payload(8192, 7);
  PutRequest put{MakeId(3, 1), testing::MakeFingerprint(1), 10, payload.data(), payload.size()};
  std::vector<PutResult> put_results = PutAsync(**tier, {put}).get();
  EXPECT_EQ(put_results.at(0).outcome, PutOutcome::kFailed);
  std::vector<Status> removed = RemoveAsync(**tier, {MakeId(3, 1)}).get();
  EXPECT_EQ(removed.at(0).code(), StatusCode::kUnavailable) << removed.at(0).ToString();
}

}  // namespace
}  // namespace kvstash::tiers
