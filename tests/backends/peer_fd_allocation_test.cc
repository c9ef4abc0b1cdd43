// OpenPeerFd maps a descriptor of the registering process through
// /proc/<pid>/fd only when it is shared memory the peer owns, of at least
// the declared size; anything else is refused with the reason, never waited
// on.
#include "peer_fd_allocation.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <cstring>
#include <string>

namespace kvstash::backends {
namespace {

constexpr uint64_t kBytes = 1 << 16;

AllocationSpec SpecFor(int fd, uint64_t bytes) {
  AllocationSpec spec;
  spec.kind = AllocationSpec::Kind::kPeerFd;
  spec.peer_fd = fd;
  spec.size_bytes = bytes;
  spec.opener = PeerCredentials{getuid(), getgid(), getpid()};
  return spec;
}

class PeerFdAllocationTest : public ::testing::Test {
 protected:
  void SetUp() override {
    fd_ = memfd_create("kvstash-peer-fd-test", MFD_CLOEXEC);
    ASSERT_GE(fd_, 0);
    ASSERT_EQ(ftruncate(fd_, kBytes), 0);
  }
  void TearDown() override { close(fd_); }

  int fd_ = -1;
  std::shared_ptr<ShmNames> names_ = std::make_shared<ShmNames>();
};

TEST_F(PeerFdAllocationTest, AMemfdOfThePeerIsMappedAndSharesItsBytes) {
  void* mine = mmap(nullptr, kBytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd_, 0);
  ASSERT_NE(mine, MAP_FAILED);
  std::memset(mine, 0x5A, 128);
  Result<std::shared_ptr<MappedAllocation>> opened = OpenPeerFd(SpecFor(fd_, kBytes), names_);
  ASSERT_TRUE(opened.ok()) << opened.status().ToString();
  EXPECT_EQ((*opened)->size_bytes(), kBytes);
  EXPECT_EQ((*opened)->base()[127], 0x5A);
  (*opened)->base()[200] = 0x33;
  EXPECT_EQ(static_cast<uint8_t*>(mine)[200], 0x33);
  EXPECT_NE(names_->Find(reinterpret_cast<uintptr_t>((*opened)->base())).find("descriptor"),
            std::string::npos);
  munmap(mine, kBytes);
}

TEST_F(PeerFdAllocationTest, APeerWithoutCredentialsIsRefused) {
  AllocationSpec spec = SpecFor(fd_, kBytes);
  spec.opener.reset();
  Result<std::shared_ptr<MappedAllocation>> opened = OpenPeerFd(spec, names_);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_NE(opened.status().message().find("ipc://"), std::string::npos);
}

TEST_F(PeerFdAllocationTest, AnObjectSmallerThanDeclaredIsRefusedWithBothSizes) {
  Result<std::shared_ptr<MappedAllocation>> opened = OpenPeerFd(SpecFor(fd_, 2 * kBytes), names_);
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kOutOfRange);
  EXPECT_NE(opened.status().message().find("holds " + std::to_string(kBytes) + " bytes, not the " +
                                           std::to_string(2 * kBytes)),
            std::string::npos)
      << opened.status().message();
}

TEST_F(PeerFdAllocationTest, AnotherUsersObjectIsRefused) {
  AllocationSpec spec = SpecFor(fd_, kBytes);
  spec.opener->uid = getuid() + 1000;  // a peer that is not the object's owner
  if (spec.opener->uid == 0) spec.opener->uid = 1;
  Result<std::shared_ptr<MappedAllocation>> opened = OpenPeerFd(spec, names_);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("belongs to uid"), std::string::npos)
      << opened.status().message();
}

TEST(PeerFdAllocationRefusals, AFileOnDiskIsRefused) {
  char path[] = "/tmp/kvstash-peer-fd-XXXXXX";
  const int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  unlink(path);
  ASSERT_EQ(ftruncate(fd, kBytes), 0);
  Result<std::shared_ptr<MappedAllocation>> opened =
      OpenPeerFd(SpecFor(fd, kBytes), std::make_shared<ShmNames>());
  close(fd);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("not a memfd"), std::string::npos)
      << opened.status().message();
}

TEST(PeerFdAllocationRefusals, APipeIsRefusedWithoutWaitingForAWriter) {
  int ends[2];
  ASSERT_EQ(pipe(ends), 0);
  close(ends[1]);
  Result<std::shared_ptr<MappedAllocation>> opened =
      OpenPeerFd(SpecFor(ends[0], kBytes), std::make_shared<ShmNames>());
  close(ends[0]);
  ASSERT_FALSE(opened.ok());
  EXPECT_NE(opened.status().message().find("is a FIFO"), std::string::npos)
      << opened.status().message();
}

TEST(PeerFdAllocationRefusals, ADescriptorNotOpenIsRefusedNamingIt) {
  Result<std::shared_ptr<MappedAllocation>> opened =
      OpenPeerFd(SpecFor(4000, kBytes), std::make_shared<ShmNames>());
  ASSERT_FALSE(opened.ok());
  EXPECT_EQ(opened.status().code(), StatusCode::kNotFound);
  EXPECT_NE(opened.status().message().find("descriptor 4000 of process"), std::string::npos);
}

}  // namespace
}  // namespace kvstash::backends
