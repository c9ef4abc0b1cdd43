// PeerWatch: owners silent past the timeout give up their registrations;
// hearing from an owner, or its unregistering, keeps them.
#include "peer_watch.h"

#include <gtest/gtest.h>

namespace kvstash::server {
namespace {

using std::chrono::milliseconds;
const PeerWatch::Clock::time_point kT0{};

TEST(PeerWatchTest, AnOwnerSilentPastTheTimeoutGivesUpEveryRegistration) {
  PeerWatch peers(milliseconds(100));
  peers.Own("engine-a", 1, kT0);
  peers.Own("engine-a", 2, kT0);
  peers.Own("engine-b", 3, kT0);
  EXPECT_TRUE(peers.TakeGone(kT0 + milliseconds(100)).empty());  // not past it yet
  peers.Heard("engine-b", kT0 + milliseconds(90));
  std::vector<PeerWatch::Gone> gone = peers.TakeGone(kT0 + milliseconds(150));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].peer, "engine-a");
  EXPECT_EQ(gone[0].registration_ids, (std::vector<uint64_t>{1, 2}));
  EXPECT_EQ(gone[0].silent, milliseconds(150));
  // Forgotten once reported; engine-b goes later.
  gone = peers.TakeGone(kT0 + milliseconds(191));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].registration_ids, (std::vector<uint64_t>{3}));
  EXPECT_TRUE(peers.TakeGone(kT0 + milliseconds(10000)).empty());
}

TEST(PeerWatchTest, UnregisteredIdsAreNotReportedAndPeersWithoutAnyAreNotWatched) {
  PeerWatch peers(milliseconds(100));
  peers.Own("engine-a", 1, kT0);
  peers.Own("engine-a", 2, kT0);
  peers.Disown(1);
  peers.Disown(99);  // unknown: ignored
  peers.Own("engine-b", 3, kT0);
  peers.Disown(3);
  peers.Heard("engine-c", kT0);  // owns nothing
  std::vector<PeerWatch::Gone> gone = peers.TakeGone(kT0 + milliseconds(500));
  ASSERT_EQ(gone.size(), 1u);
  EXPECT_EQ(gone[0].peer, "engine-a");
  EXPECT_EQ(gone[0].registration_ids, (std::vector<uint64_t>{2}));
}

TEST(PeerWatchTest, ATimeoutOfZeroNeverGivesUp) {
  PeerWatch peers(milliseconds(0));
  peers.Own("engine-a", 1, kT0);
  EXPECT_TRUE(peers.TakeGone(kT0 + std::chrono::hours(24)).empty());
}

TEST(PeerWatchTest, TheDaemonsOwnStallIsNobodysSilence) {
  PeerWatch peers(milliseconds(100));
  peers.Own("engine-a", 1, kT0);
  // The daemon stopped for 10 s right after hearing engine-a; engine-a's
  // silence is what is left: 50 ms, not 10.05 s.
  peers.Forgive(milliseconds(10000));
  EXPECT_TRUE(peers.TakeGone(kT0 + milliseconds(10050)).empty());
  // Silence after the stall still counts.
  ASSERT_EQ(peers.TakeGone(kT0 + milliseconds(10101)).size(), 1u);
}

}  // namespace
}  // namespace kvstash::server
