// The path choice of multi-path retrieves and stores: which NVLink peers
// help, from the topology and the per-link queues of the copy's direction
// (multipath_split_test.cc: how the copy is then cut between them).
#include "multipath_policy.h"

#include <gtest/gtest.h>

#include "kvstash/backends/link_loads.h"

namespace kvstash::backends {
namespace {

constexpr uint64_t kMiB = 1 << 20;

RelayCandidate Idle(int device) { return {device, true, true, 0}; }

TEST(MultipathPolicy, AnIdleLinkedPeerHelpsALargeRetrieve) {
  const std::vector<size_t> chosen = ChooseRelays({}, 128 * kMiB, 4, {Idle(1)});
  EXPECT_EQ(chosen, std::vector<size_t>({0}));
}

TEST(MultipathPolicy, NoPeerWithoutNvlinkOrPeerAccess) {
  RelayCandidate pcie_only = Idle(1);
  pcie_only.linked = false;
  EXPECT_TRUE(ChooseRelays({}, 128 * kMiB, 4, {pcie_only}).empty());
}

TEST(MultipathPolicy, APeerLoadingForItsOwnEngineIsLeftAlone) {
  RelayCandidate busy = Idle(1);
  busy.queued_bytes = 32 * kMiB;
  EXPECT_TRUE(ChooseRelays({}, 128 * kMiB, 4, {busy}).empty());
  MultipathPolicy tolerant;
  tolerant.idle_bytes = 64 * kMiB;
  EXPECT_EQ(ChooseRelays(tolerant, 128 * kMiB, 4, {busy}).size(), 1u);
}

TEST(MultipathPolicy, EveryGpuLoadingAtOnceFallsBackToOnePath) {
  // Four GPUs each retrieving for their own engine: every peer's queue
  // holds bytes, so nobody helps anybody.
  LinkLoads loads(4);
  for (int d = 0; d < 4; ++d) loads.Add(d, Direction::kRetrieve, 64 * kMiB);
  for (int target = 0; target < 4; ++target) {
    std::vector<RelayCandidate> peers;
    for (int d = 0; d < 4; ++d) {
      if (d != target) peers.push_back({d, true, true, loads.Bytes(d, Direction::kRetrieve)});
    }
    EXPECT_TRUE(ChooseRelays({}, 64 * kMiB, 2, peers).empty()) << "GPU " << target;
  }
}

TEST(MultipathPolicy, StoresOnAPeerDoNotMakeItsRetrieveLinkBusy) {
  LinkLoads loads(2);
  loads.Add(1, Direction::kStore, 512 * kMiB);  // the other direction of PCIe
  EXPECT_EQ(loads.Bytes(1, Direction::kRetrieve), 0u);
  EXPECT_EQ(ChooseRelays({}, 128 * kMiB, 4, {{1, true, true, loads.Bytes(1, Direction::kRetrieve)}})
                .size(),
            1u);
}

TEST(MultipathPolicy, RetrievesOnAPeerDoNotMakeItsStoreLinkBusy) {
  // A store is carried by a peer whose own store queue is idle, whatever
  // it retrieves (the other direction of PCIe); its own stores keep it.
  LinkLoads loads(2);
  loads.Add(1, Direction::kRetrieve, 512 * kMiB);
  EXPECT_EQ(
      ChooseRelays({}, 128 * kMiB, 4, {{1, true, true, loads.Bytes(1, Direction::kStore)}}).size(),
      1u);
  loads.Add(1, Direction::kStore, 32 * kMiB);
  EXPECT_TRUE(ChooseRelays({}, 128 * kMiB, 4, {{1, true, true, loads.Bytes(1, Direction::kStore)}})
                  .empty());
}

TEST(MultipathPolicy, AHeldOrFailedPeerIsNotUsed) {
  RelayCandidate held = Idle(1);
  held.available = false;
  EXPECT_TRUE(ChooseRelays({}, 128 * kMiB, 4, {held}).empty());
}

TEST(MultipathPolicy, SmallRetrievesStayOnOnePath) {
  EXPECT_TRUE(ChooseRelays({}, 1 * kMiB, 8, {Idle(1), Idle(2)}).empty());
  // 5 MiB for three paths of at least 2 MiB: two paths.
  EXPECT_EQ(ChooseRelays({}, 5 * kMiB, 8, {Idle(1), Idle(2)}).size(), 1u);
}

TEST(MultipathPolicy, NoMorePathsThanSharesOrTheCap) {
  const std::vector<RelayCandidate> three = {Idle(1), Idle(2), Idle(3)};
  EXPECT_TRUE(ChooseRelays({}, 1024 * kMiB, 1, three).empty());
  EXPECT_EQ(ChooseRelays({}, 1024 * kMiB, 2, three).size(), 1u);
  EXPECT_EQ(ChooseRelays({}, 1024 * kMiB, 64, three).size(), 3u);
  MultipathPolicy capped;
  capped.max_paths = 2;
  EXPECT_EQ(ChooseRelays(capped, 1024 * kMiB, 64, three).size(), 1u);
}

TEST(MultipathPolicy, OneLargeChunkTakesEveryIdlePeer) {
  // A 32 MiB chunk of 32 layers is 32 shares: cut by layers, it fills four
  // links.
  EXPECT_EQ(ChooseRelays({}, 32 * kMiB, 32, {Idle(1), Idle(2), Idle(3)}).size(), 3u);
}

TEST(MultipathPolicy, AQueueAtTheIdleLimitIsStillIdle) {
  MultipathPolicy policy;
  policy.idle_bytes = 10;
  EXPECT_TRUE(RelayIdle(policy, 10));
  EXPECT_FALSE(RelayIdle(policy, 11));
  EXPECT_FALSE(RelayIdle({}, 1)) << "by default any queued byte makes a relay busy";
}

TEST(MultipathPolicy, ChosenRelaysKeepTheCandidatesOrder) {
  RelayCandidate busy = Idle(2);
  busy.queued_bytes = 1;
  const std::vector<size_t> chosen = ChooseRelays({}, 1024 * kMiB, 64, {Idle(1), busy, Idle(3)});
  EXPECT_EQ(chosen, std::vector<size_t>({0, 2}));
}

TEST(LinkLoads, CountsQueuedBytesPerDeviceAndDirection) {
  LinkLoads loads(2);
  loads.Add(0, Direction::kRetrieve, 10);
  loads.Add(0, Direction::kRetrieve, 5);
  loads.Add(1, Direction::kStore, 7);
  loads.Remove(0, Direction::kRetrieve, 10);
  EXPECT_EQ(loads.Bytes(0, Direction::kRetrieve), 5u);
  EXPECT_EQ(loads.Bytes(0, Direction::kStore), 0u);
  EXPECT_EQ(loads.Bytes(1, Direction::kStore), 7u);
  loads.Add(5, Direction::kStore, 1);  // no such device: ignored
  EXPECT_EQ(loads.Bytes(5, Direction::kStore), 0u);
}

}  // namespace
}  // namespace kvstash::backends
