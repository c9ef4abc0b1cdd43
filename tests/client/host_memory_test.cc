// HostKvMemory: creation, sharing by name, and cleanup.
#include "kvstash/host_memory.h"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstring>

namespace kvstash {
namespace {

bool ShmExists(const std::string& name) {
  const int fd = ::shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) return false;
  ::close(fd);
  return true;
}

TEST(HostKvMemory, CreatesAZeroedRegionWithAUniqueName) {
  auto a = HostKvMemory::Create(1 << 20);
  auto b = HostKvMemory::Create(4096);
  ASSERT_TRUE(a.ok()) << a.status().ToString();
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_NE(a->name(), b->name());
  EXPECT_EQ(a->name().rfind("/kvstash-" + std::to_string(::getpid()) + "-", 0), 0u) << a->name();
  EXPECT_EQ(a->size(), 1u << 20);
  for (uint64_t i = 0; i < a->size(); i += 4096) ASSERT_EQ(a->data()[i], 0);
  const HostShm handle = a->handle();
  EXPECT_EQ(handle.name, a->name());
  EXPECT_EQ(handle.size_bytes, a->size());
}

TEST(HostKvMemory, AnotherMappingOfTheNameSeesTheSameBytes) {
  auto memory = HostKvMemory::Create(8192);
  ASSERT_TRUE(memory.ok());
  std::memcpy(memory->data() + 100, "kvstash", 7);
  const int fd = ::shm_open(memory->name().c_str(), O_RDWR, 0);
  ASSERT_GE(fd, 0);
  struct stat info {};
  ASSERT_EQ(::fstat(fd, &info), 0);
  EXPECT_EQ(uint64_t(info.st_size), memory->size());
  EXPECT_EQ(info.st_mode & 0777, 0660u);
  void* other = ::mmap(nullptr, 8192, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  ASSERT_NE(other, MAP_FAILED);
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(other) + 100, "kvstash", 7), 0);
  static_cast<uint8_t*>(other)[0] = 42;
  EXPECT_EQ(memory->data()[0], 42);
  ::munmap(other, 8192);
}

TEST(HostKvMemory, UnlinksItsNameWhenDestroyed) {
  std::string name;
  {
    auto memory = HostKvMemory::Create(4096);
    ASSERT_TRUE(memory.ok());
    name = memory->name();
    EXPECT_TRUE(ShmExists(name));
  }
  EXPECT_FALSE(ShmExists(name));
}

TEST(HostKvMemory, MovingTransfersOwnership) {
  auto created = HostKvMemory::Create(4096);
  ASSERT_TRUE(created.ok());
  HostKvMemory first = std::move(created.value());
  const std::string name = first.name();
  HostKvMemory second = std::move(first);
  EXPECT_EQ(second.name(), name);
  EXPECT_EQ(first.data(), nullptr);  // NOLINT(bugprone-use-after-move): checks the moved-from state
  EXPECT_TRUE(ShmExists(name));
  auto replacement = HostKvMemory::Create(4096);
  ASSERT_TRUE(replacement.ok());
  second = std::move(replacement.value());  // releases the first region
  EXPECT_FALSE(ShmExists(name));
}

TEST(HostKvMemory, RejectsZeroSize) {
  auto memory = HostKvMemory::Create(0);
  ASSERT_FALSE(memory.ok());
  EXPECT_EQ(memory.status().code(), StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace kvstash
