// L2 on local disk: byte-exact round trips, the index rebuilt after a
// restart, writes cut off by SIGKILL, truncated and corrupted files, LRU
// eviction under capacity and pins.
#include "kvstash/tiers/disk_tier.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <future>
#include <thread>

#include "tier_test_data.h"

namespace kvstash::tiers {
namespace {

using testing::FillPayload;
using testing::HoldsChunk;
using testing::MakeFingerprint;
using testing::MakeId;
using testing::TempDir;
using testing::TestBuffer;

constexpr uint64_t kMiB = 1 << 20;

std::unique_ptr<DiskTier> OpenTier(const std::string& path, uint64_t capacity = 1024 * kMiB,
                                   bool io_uring = true) {
  DiskTierOptions options;
  options.path = path;
  options.capacity_bytes = capacity;
  options.io_uring = io_uring;
  Result<std::unique_ptr<DiskTier>> tier = DiskTier::Open(options);
  EXPECT_TRUE(tier.ok()) << tier.status().ToString();
  return tier.ok() ? std::move(tier).value() : nullptr;
}

// Writes chunk `id` (its FillPayload bytes) and waits.
PutResult PutChunk(Tier& tier, const ChunkId& id, size_t size, size_t misalign = 0) {
  TestBuffer buffer(size, misalign);
  FillPayload(id, buffer.data(), size);
  PutRequest r{id, MakeFingerprint(1), 123, buffer.data(), size};
  return PutAsync(tier, {r}).get().at(0);
}

// Reads chunk `id` back; Ok only when it also holds exactly its bytes.
Status GetChunk(Tier& tier, const ChunkId& id, size_t size, size_t misalign = 0) {
  TestBuffer buffer(size, misalign);
  GetRequest r{{id, MakeFingerprint(1), size}, buffer.data()};
  GetResult result = GetAsync(tier, {r}).get().at(0);
  if (!result.status.ok()) return result.status;
  if (!HoldsChunk(id, buffer.data(), size)) return Status::Internal("wrong bytes served");
  if (result.num_tokens != 123) return Status::Internal("wrong token count");
  return Status::Ok();
}

bool Present(Tier& tier, const ChunkId& id) {
  return ContainsAsync(tier, {id}).get().at(0).present;
}

// Both I/O engines: io_uring (the default) and the thread pool that takes
// over where io_uring is refused.
class DiskTierEngines : public ::testing::TestWithParam<bool> {};

TEST_P(DiskTierEngines, RoundTripsByteExactAlignedOrNot) {
  TempDir dir;
  auto tier = OpenTier(dir.path(), 1024 * kMiB, GetParam());
  ASSERT_TRUE(tier);
  EXPECT_STREQ(tier->io_engine(), GetParam() ? "io_uring" : "thread pool")
      << tier->io_uring_refused_reason();
  // Sizes around the 4 KiB block and the 8 MiB bounce area; offsets of 0
  // (page-aligned like L1 slots) and 256 (aligned like chunk groups).
  const size_t sizes[] = {1, 4095, 4096, 4097, 256 * 1024, 9 * kMiB + 100};
  uint64_t index = 0;
  for (size_t size : sizes) {
    for (size_t misalign : {0, 256}) {
      const ChunkId id = MakeId(1, index++);
      PutResult put = PutChunk(*tier, id, size, misalign);
      ASSERT_EQ(put.outcome, PutOutcome::kStored) << put.status.ToString();
      EXPECT_TRUE(Present(*tier, id));
      Status got = GetChunk(*tier, id, size, 256 - misalign);
      EXPECT_TRUE(got.ok()) << size << " bytes, misaligned by " << misalign << ": "
                            << got.ToString();
    }
  }
  EXPECT_EQ(tier->stats().get_hits.load(), index);
  EXPECT_EQ(tier->stats().corrupt_chunks.load(), 0u);
}

// More chunks than the ring has room for in flight, read back while
// others are still being written.
TEST_P(DiskTierEngines, ManyChunksInFlightStayByteExact) {
  TempDir dir;
  DiskTierOptions options;
  options.path = dir.path();
  options.capacity_bytes = 1024 * kMiB;
  options.io_uring = GetParam();
  options.io_depth = 3;
  options.io_rings = 2;
  options.io_threads = 2;
  auto tier = DiskTier::Open(options);
  ASSERT_TRUE(tier.ok()) << tier.status().ToString();
  const size_t size = 512 * 1024 + 100;
  std::vector<TestBuffer> in, out;
  std::vector<PutRequest> puts;
  std::vector<GetRequest> gets;
  for (uint64_t i = 0; i < 40; ++i) {
    in.emplace_back(size, i % 2 ? 256 : 0);
    FillPayload(MakeId(9, i), in.back().data(), size);
    puts.push_back({MakeId(9, i), MakeFingerprint(1), 123, in.back().data(), size});
    out.emplace_back(size, i % 3 ? 0 : 256);
    gets.push_back({{MakeId(9, i), MakeFingerprint(1), size}, out.back().data()});
  }
  auto first_half = std::vector<PutRequest>(puts.begin(), puts.begin() + 20);
  for (const PutResult& r : PutAsync(**tier, first_half).get())
    ASSERT_EQ(r.outcome, PutOutcome::kStored);
  auto second_half = PutAsync(**tier, std::vector<PutRequest>(puts.begin() + 20, puts.end()));
  std::vector<GetResult> got =
      GetAsync(**tier, std::vector<GetRequest>(gets.begin(), gets.begin() + 20)).get();
  for (const PutResult& r : second_half.get()) ASSERT_EQ(r.outcome, PutOutcome::kStored);
  std::vector<GetResult> rest =
      GetAsync(**tier, std::vector<GetRequest>(gets.begin() + 20, gets.end())).get();
  got.insert(got.end(), rest.begin(), rest.end());
  for (uint64_t i = 0; i < 40; ++i) {
    ASSERT_TRUE(got[i].status.ok()) << i << ": " << got[i].status.ToString();
    EXPECT_TRUE(HoldsChunk(MakeId(9, i), out[i].data(), size)) << i;
  }
}

INSTANTIATE_TEST_SUITE_P(IoEngines, DiskTierEngines, ::testing::Bool(),
                         [](const ::testing::TestParamInfo<bool>& info) {
                           return info.param ? "IoUring" : "ThreadPool";
                         });

TEST(DiskTier, ReportsAlreadyPresentAndMisses) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const ChunkId id = MakeId(1, 1);
  ASSERT_EQ(PutChunk(*tier, id, 5000).outcome, PutOutcome::kStored);
  EXPECT_EQ(PutChunk(*tier, id, 5000).outcome, PutOutcome::kAlreadyPresent);
  EXPECT_EQ(GetChunk(*tier, MakeId(1, 2), 5000).code(), StatusCode::kNotFound);
  // The same key in another scope is another chunk.
  ChunkId other_scope = id;
  other_scope.scope = MakeId(2, 1).scope;
  EXPECT_FALSE(Present(*tier, other_scope));
  EXPECT_EQ(GetChunk(*tier, other_scope, 5000).code(), StatusCode::kNotFound);
}

// The scope (namespace id) already mixes in the layout, so a chunk whose
// header names another layout under the same scope is corrupt: dropped.
TEST(DiskTier, AChunkOfAnotherLayoutOrSizeIsMissingAndDropped) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const ChunkId id = MakeId(1, 1);
  ASSERT_EQ(PutChunk(*tier, id, 5000).outcome, PutOutcome::kStored);
  TestBuffer buffer(5000);
  GetRequest wrong_layout{{id, MakeFingerprint(2), 5000}, buffer.data()};
  Status s = GetAsync(*tier, {wrong_layout}).get()[0].status;
  EXPECT_EQ(s.code(), StatusCode::kNotFound);
  EXPECT_NE(s.message().find("layout fingerprint"), std::string::npos) << s.message();
  EXPECT_FALSE(Present(*tier, id));
  const ChunkId other = MakeId(1, 2);
  ASSERT_EQ(PutChunk(*tier, other, 5000).outcome, PutOutcome::kStored);
  EXPECT_EQ(GetChunk(*tier, other, 4999).code(), StatusCode::kNotFound);
  EXPECT_FALSE(Present(*tier, other));
}

TEST(DiskTier, RestartRebuildsTheIndexFromDisk) {
  TempDir dir;
  const size_t sizes[] = {4096, 70000, 3 * kMiB + 5};
  {
    auto tier = OpenTier(dir.path());
    for (uint64_t i = 0; i < 30; ++i) {
      ASSERT_EQ(PutChunk(*tier, MakeId(i % 3, i), sizes[i % 3]).outcome, PutOutcome::kStored);
    }
  }
  auto tier = OpenTier(dir.path());
  ASSERT_TRUE(tier);
  EXPECT_EQ(tier->rebuild_report().chunks, 30u);
  EXPECT_EQ(tier->rebuild_report().dropped_files, 0u);
  EXPECT_EQ(tier->Usage().chunks, 30u);
  for (uint64_t i = 0; i < 30; ++i) {
    const ChunkId id = MakeId(i % 3, i);
    std::vector<Presence> p = ContainsAsync(*tier, {id}).get();
    ASSERT_TRUE(p[0].present) << i;
    EXPECT_EQ(p[0].header.num_tokens, 123u);
    EXPECT_TRUE(GetChunk(*tier, id, sizes[i % 3]).ok()) << i;
  }
}

TEST(DiskTier, SecondOpenOfTheSameDirectoryIsRefused) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  DiskTierOptions options;
  options.path = dir.path();
  options.capacity_bytes = kMiB;
  Result<std::unique_ptr<DiskTier>> second = DiskTier::Open(options);
  ASSERT_FALSE(second.ok());
  EXPECT_EQ(second.status().code(), StatusCode::kUnavailable);
  EXPECT_NE(second.status().message().find(dir.path()), std::string::npos);
}

TEST(DiskTier, TruncatedFileIsMissingNotServed) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const ChunkId id = MakeId(1, 1);
  const size_t size = 100000;
  ASSERT_EQ(PutChunk(*tier, id, size).outcome, PutOutcome::kStored);
  ASSERT_EQ(::truncate(tier->PathOf(id).c_str(), 4096 + 50000), 0);
  Status got = GetChunk(*tier, id, size);
  EXPECT_EQ(got.code(), StatusCode::kNotFound) << got.ToString();
  EXPECT_FALSE(Present(*tier, id));  // dropped from the index, and the file deleted
  EXPECT_FALSE(std::filesystem::exists(tier->PathOf(id)));
  EXPECT_EQ(tier->stats().corrupt_chunks.load(), 1u);
  // Put again: the tier takes it.
  EXPECT_EQ(PutChunk(*tier, id, size).outcome, PutOutcome::kStored);
  EXPECT_TRUE(GetChunk(*tier, id, size).ok());
}

// Overwrites `count` bytes at `offset` of a file.
void Scribble(const std::string& path, off_t offset, size_t count = 1) {
  const int fd = ::open(path.c_str(), O_WRONLY);
  ASSERT_GE(fd, 0);
  std::vector<uint8_t> junk(count, 0x5A);
  ASSERT_EQ(::pwrite(fd, junk.data(), count, offset), static_cast<ssize_t>(count));
  ::close(fd);
}

TEST(DiskTier, CorruptedPayloadOrHeaderIsMissingNotServed) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const size_t size = 50000;
  // Offsets: the key, the token count, the payload size, the payload
  // checksum, the header checksum, the first, a middle and the last payload
  // byte.
  const off_t offsets[] = {10, 104, 112, 120, 130, 4096, 4096 + 20000, 4096 + size - 1};
  uint64_t index = 0;
  for (off_t offset : offsets) {
    const ChunkId id = MakeId(1, index++);
    ASSERT_EQ(PutChunk(*tier, id, size).outcome, PutOutcome::kStored);
    Scribble(tier->PathOf(id), offset);
    Status got = GetChunk(*tier, id, size);
    EXPECT_EQ(got.code(), StatusCode::kNotFound) << "offset " << offset << ": " << got.ToString();
    EXPECT_FALSE(Present(*tier, id)) << offset;
  }
  EXPECT_EQ(tier->stats().corrupt_chunks.load(), index);
}

TEST(DiskTier, RebuildDropsInvalidFiles) {
  TempDir dir;
  const size_t size = 20000;
  std::string truncated, bad_header, renamed, stray;
  {
    auto tier = OpenTier(dir.path());
    for (uint64_t i = 0; i < 5; ++i)
      ASSERT_EQ(PutChunk(*tier, MakeId(1, i), size).outcome, PutOutcome::kStored);
    truncated = tier->PathOf(MakeId(1, 0));
    bad_header = tier->PathOf(MakeId(1, 1));
    // A valid file under another chunk's name.
    renamed = tier->PathOf(MakeId(1, 99));
    std::filesystem::rename(tier->PathOf(MakeId(1, 2)), renamed);
  }
  ASSERT_EQ(::truncate(truncated.c_str(), 4096 + 100), 0);
  Scribble(bad_header, 50);
  stray = dir.path() + "/tmp/7.tmp";  // a write a crash cut off
  { std::ofstream(stray) << "partial"; }
  auto tier = OpenTier(dir.path());
  EXPECT_EQ(tier->rebuild_report().chunks, 2u);
  EXPECT_EQ(tier->rebuild_report().dropped_files, 3u);
  EXPECT_EQ(tier->rebuild_report().temp_files, 1u);
  for (const std::string& p : {truncated, bad_header, renamed, stray}) {
    EXPECT_FALSE(std::filesystem::exists(p)) << p;
  }
  for (uint64_t i : {3, 4}) EXPECT_TRUE(GetChunk(*tier, MakeId(1, i), size).ok());
  for (uint64_t i : {0, 1, 2, 99}) EXPECT_FALSE(Present(*tier, MakeId(1, i)));
}

TEST(DiskTier, EvictsLeastRecentlyUsedUnderCapacity) {
  TempDir dir;
  const size_t size = 60 * 1024;               // 15 blocks
  const uint64_t file = 4096 + 60 * 1024;      // 16 blocks
  auto tier = OpenTier(dir.path(), 3 * file);  // room for three
  for (uint64_t i = 0; i < 3; ++i)
    ASSERT_EQ(PutChunk(*tier, MakeId(1, i), size).outcome, PutOutcome::kStored);
  ASSERT_TRUE(GetChunk(*tier, MakeId(1, 0), size).ok());  // 0 is now the most recent
  ASSERT_EQ(PutChunk(*tier, MakeId(1, 3), size).outcome, PutOutcome::kStored);
  EXPECT_TRUE(Present(*tier, MakeId(1, 0)));
  EXPECT_FALSE(Present(*tier, MakeId(1, 1)));  // the least recently used
  EXPECT_FALSE(std::filesystem::exists(tier->PathOf(MakeId(1, 1))));
  EXPECT_TRUE(Present(*tier, MakeId(1, 2)));
  EXPECT_TRUE(Present(*tier, MakeId(1, 3)));
  EXPECT_EQ(tier->Usage().used_bytes, 3 * file);
  EXPECT_EQ(tier->stats().evicted_chunks.load(), 1u);
  // Larger than the whole tier: refused, nothing evicted.
  PutResult huge = PutChunk(*tier, MakeId(1, 9), 4 * file);
  EXPECT_EQ(huge.outcome, PutOutcome::kFailed);
  EXPECT_EQ(huge.status.code(), StatusCode::kTooLarge);
  EXPECT_EQ(tier->Usage().chunks, 3u);
}

TEST(DiskTier, PinnedChunksAreNeitherEvictedNorRemovedUntilUnpinned) {
  TempDir dir;
  const size_t size = 60 * 1024;
  const uint64_t file = 4096 + 60 * 1024;
  auto tier = OpenTier(dir.path(), 2 * file);
  const ChunkId a = MakeId(1, 0), b = MakeId(1, 1), c = MakeId(1, 2);
  ASSERT_EQ(PutChunk(*tier, a, size).outcome, PutOutcome::kStored);
  ASSERT_EQ(PutChunk(*tier, b, size).outcome, PutOutcome::kStored);
  EXPECT_EQ(tier->Pin({a, b, c}), (std::vector<bool>{true, true, false}));
  PutResult no_room = PutChunk(*tier, c, size);
  EXPECT_EQ(no_room.outcome, PutOutcome::kFailed);
  EXPECT_EQ(no_room.status.code(), StatusCode::kResourceExhausted) << no_room.status.ToString();
  // Removal of a pinned chunk waits for its lease: invisible now, readable
  // by nobody, deleted on Unpin.
  ASSERT_TRUE(RemoveAsync(*tier, {b}).get()[0].ok());
  EXPECT_FALSE(Present(*tier, b));
  EXPECT_TRUE(std::filesystem::exists(tier->PathOf(b)));
  tier->Unpin({a, b});
  EXPECT_FALSE(std::filesystem::exists(tier->PathOf(b)));
  ASSERT_EQ(PutChunk(*tier, c, size).outcome, PutOutcome::kStored);
  EXPECT_TRUE(GetChunk(*tier, a, size).ok());
  EXPECT_TRUE(GetChunk(*tier, c, size).ok());
}

TEST(DiskTier, ManyConcurrentPutsAndGetsStayByteExact) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const size_t size = 128 * 1024 + 256;
  std::vector<TestBuffer> buffers;
  std::vector<PutRequest> puts;
  for (uint64_t i = 0; i < 64; ++i) {
    buffers.emplace_back(size);
    FillPayload(MakeId(4, i), buffers.back().data(), size);
    puts.push_back({MakeId(4, i), MakeFingerprint(1), 123, buffers.back().data(), size});
  }
  for (const PutResult& r : PutAsync(*tier, puts).get()) ASSERT_EQ(r.outcome, PutOutcome::kStored);
  std::vector<TestBuffer> out;
  std::vector<GetRequest> gets;
  for (uint64_t i = 0; i < 64; ++i) {
    out.emplace_back(size);
    gets.push_back({{MakeId(4, i), MakeFingerprint(1), size}, out.back().data()});
  }
  std::vector<GetResult> results = GetAsync(*tier, gets).get();
  for (uint64_t i = 0; i < 64; ++i) {
    ASSERT_TRUE(results[i].status.ok()) << results[i].status.ToString();
    EXPECT_TRUE(HoldsChunk(MakeId(4, i), out[i].data(), size)) << i;
  }
}

// Callbacks run on the tier's threads and may call the tier again (the
// chunk store will, to chain a promotion): no lock may be held around them.
TEST(DiskTier, CallbacksMayCallTheTierAgain) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  const ChunkId id = MakeId(1, 1);
  TestBuffer buffer(8192);
  FillPayload(id, buffer.data(), 8192);
  auto put = [&](PutOutcome expected) {
    std::promise<bool> done;
    tier->Put({{id, MakeFingerprint(1), 123, buffer.data(), 8192}}, [&](std::vector<PutResult> r) {
      tier->Contains({id}, [&, r](std::vector<Presence> p) {
        done.set_value(r[0].outcome == expected && p[0].present);
      });
    });
    return done.get_future().get();
  };
  EXPECT_TRUE(put(PutOutcome::kStored));
  EXPECT_TRUE(put(PutOutcome::kAlreadyPresent));  // answered under the index lock before
}

// A child process writes large chunks in a loop and is SIGKILLed mid-way.
// Whatever it left must either be missing or read back byte-exact: no
// partial write may look valid.
TEST(DiskTier, SigkillMidWriteLeavesNothingThatReadsAsValid) {
  TempDir dir;
  const size_t size = 16 * kMiB + 4096 * 3 + 100;
  int progress[2];
  ASSERT_EQ(::pipe(progress), 0);
  const pid_t child = ::fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ::close(progress[0]);
    auto tier = OpenTier(dir.path(), 64ull << 30);
    if (!tier) ::_exit(3);
    TestBuffer buffer(size);
    for (uint64_t i = 0;; ++i) {
      const ChunkId id = MakeId(5, i);
      FillPayload(id, buffer.data(), size);
      PutRequest r{id, MakeFingerprint(1), 123, buffer.data(), size};
      if (PutAsync(*tier, {r}).get()[0].outcome != PutOutcome::kStored) ::_exit(4);
      if (::write(progress[1], "+", 1) != 1) ::_exit(5);
    }
  }
  ::close(progress[1]);
  // Never leave the writer running, whatever fails below.
  struct KillOnExit {
    pid_t pid;
    ~KillOnExit() {
      if (pid > 0 && ::kill(pid, SIGKILL) == 0) ::waitpid(pid, nullptr, 0);
    }
  } guard{child};
  // Two chunks complete, then the third is caught mid-write: its temporary
  // file exists (O_DIRECT writes set the file size only when the whole
  // transfer is done, so the size cannot tell how far it got).
  for (int complete = 0; complete < 2;) {
    char c;
    ASSERT_EQ(::read(progress[0], &c, 1), 1) << "the writer died";
    ++complete;
  }
  const std::string tmp = dir.path() + "/tmp";
  // Kill as soon as the third write shows (or after 30 ms in any case: the
  // property below must hold wherever the kill lands).
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(30);
  bool mid_write = false;
  while (!mid_write && std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& f : std::filesystem::directory_iterator(tmp, ec)) {
      mid_write = mid_write || f.is_regular_file(ec);
    }
  }
  ASSERT_EQ(::kill(child, SIGKILL), 0);
  int status = 0;
  ASSERT_EQ(::waitpid(child, &status, 0), child);
  guard.pid = -1;
  ::close(progress[0]);
  ASSERT_TRUE(WIFSIGNALED(status)) << "writer exited with " << WEXITSTATUS(status);
  if (!mid_write) std::printf("note: the kill landed between two writes this time\n");

  auto tier = OpenTier(dir.path(), 64ull << 30);
  ASSERT_TRUE(tier);
  const uint64_t indexed = tier->rebuild_report().chunks;
  EXPECT_GE(indexed, 2u);
  // The cut-off write was either left as a temporary file (deleted now) or,
  // if the kill landed just after its rename, is complete and indexed.
  EXPECT_LE(tier->rebuild_report().temp_files, 1u);
  EXPECT_TRUE(std::filesystem::is_empty(tmp));
  // Every chunk it indexed reads back exactly; nothing past them exists.
  for (uint64_t i = 0; i < indexed; ++i) {
    EXPECT_TRUE(GetChunk(*tier, MakeId(5, i), size).ok()) << i;
  }
  EXPECT_FALSE(Present(*tier, MakeId(5, indexed)));
  EXPECT_EQ(tier->stats().corrupt_chunks.load(), 0u);
}

}  // namespace
}  // namespace kvstash::tiers

namespace kvstash::tiers {
namespace {

TEST(DiskTier, AChunkSayingMoreTokensThanTheReadersChunkIsMissingAndDropped) {
  TempDir dir;
  auto tier = OpenTier(dir.path());
  ASSERT_TRUE(tier);
  const ChunkId id = MakeId(12, 1);
  const size_t size = 8192;
  ASSERT_EQ(PutChunk(*tier, id, size).outcome, PutOutcome::kStored);  // 123 tokens
  TestBuffer buffer(size);
  GetRequest r{{id, MakeFingerprint(1), size, /*max_tokens=*/64}, buffer.data()};
  GetResult result = GetAsync(*tier, {r}).get().at(0);
  EXPECT_EQ(result.status.code(), StatusCode::kNotFound) << result.status.ToString();
  EXPECT_NE(result.status.message().find("tokens"), std::string::npos) << result.status.message();
  EXPECT_FALSE(Present(*tier, id)) << "dropped, never served";
}

}  // namespace
}  // namespace kvstash::tiers

namespace kvstash::tiers {
namespace {

TEST(DiskTier, ATierOpenedWhileAnotherStillDrainsItsWritesLosesNoneOfThem) {
  // A daemon restarted while the old one still finishes its queued writes:
  // the new tier waits for the lock, so it neither empties DIR/tmp under
  // the old one's writes nor misses a chunk in its index.
  TempDir dir;
  auto old_tier = OpenTier(dir.path());
  ASSERT_TRUE(old_tier);
  const size_t size = 2 * kMiB;
  std::vector<TestBuffer> buffers;
  std::vector<PutRequest> puts;
  buffers.reserve(64);
  for (uint64_t i = 0; i < 64; ++i) {
    buffers.emplace_back(size);
    FillPayload(MakeId(13, i), buffers.back().data(), size);
    puts.push_back({MakeId(13, i), MakeFingerprint(1), 123, buffers.back().data(), size});
  }
  auto written = std::make_shared<std::atomic<int>>(0);
  old_tier->Put(puts, [written](std::vector<PutResult> results) {
    for (const PutResult& r : results) written->fetch_add(r.outcome == PutOutcome::kStored);
  });
  std::thread stopping([&] { old_tier.reset(); });  // drains the queue
  DiskTierOptions options;
  options.path = dir.path();
  options.capacity_bytes = 1024 * kMiB;
  Result<std::unique_ptr<DiskTier>> next = Status::Internal("not opened");
  for (int i = 0; i < 2000 && !next.ok(); ++i) next = DiskTier::Open(options);
  stopping.join();
  ASSERT_TRUE(next.ok()) << next.status().ToString();
  EXPECT_EQ(written->load(), 64);
  EXPECT_EQ((*next)->rebuild_report().chunks, 64u);
  for (uint64_t i = 0; i < 64; ++i) EXPECT_TRUE(GetChunk(**next, MakeId(13, i), size).ok()) << i;
}

}  // namespace
}  // namespace kvstash::tiers
