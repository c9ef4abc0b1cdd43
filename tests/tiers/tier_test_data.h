// Chunk ids and payloads for tier tests: every byte derives from the chunk's
// id, so a test can check a read byte for byte without keeping copies.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kvstash/tiers/chunk_header.h"

namespace kvstash::tiers::testing {

inline uint64_t SplitMix(uint64_t& state) {
  uint64_t z = (state += 0x9e3779b97f4a7c15ULL);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
  return z ^ (z >> 31);
}

// Chunk `index` of scope `scope`: distinct for every (scope, index).
inline ChunkId MakeId(uint64_t scope, uint64_t index) {
  ChunkId id;
  uint64_t s = scope * 1000003 + 17;
  for (size_t i = 0; i < 32; i += 8) {
    const uint64_t v = SplitMix(s);
    std::memcpy(id.scope.data() + i, &v, 8);
  }
  uint64_t k = (scope << 40) ^ (index + 1) * 0x2545F4914F6CDD1DULL;
  for (size_t i = 0; i < 32; i += 8) {
    const uint64_t v = SplitMix(k);
    std::memcpy(id.key.data() + i, &v, 8);
  }
  return id;
}

inline Fingerprint MakeFingerprint(uint8_t seed) {
  Fingerprint f;
  for (size_t i = 0; i < f.size(); ++i) f[i] = static_cast<uint8_t>(seed * 31 + i);
  return f;
}

// The bytes a chunk with this id holds.
inline void FillPayload(const ChunkId& id, uint8_t* out, size_t size) {
  uint64_t state = 0;
  std::memcpy(&state, id.key.data(), 8);
  size_t i = 0;
  for (; i + 8 <= size; i += 8) {
    const uint64_t v = SplitMix(state);
    std::memcpy(out + i, &v, 8);
  }
  for (const uint64_t v = SplitMix(state); i < size; ++i)
    out[i] = static_cast<uint8_t>(v >> (8 * (i % 8)));
}

// Page-aligned memory (as L1 slots are), optionally offset to test the
// unaligned path.
class TestBuffer {
 public:
  explicit TestBuffer(size_t size, size_t misalign = 0)
      : raw_(static_cast<uint8_t*>(
            std::aligned_alloc(4096, (size + misalign + 4095) / 4096 * 4096 + 4096))),
        size_(size),
        misalign_(misalign) {
    std::memset(raw_.get(), 0xEE, size + misalign);
  }
  uint8_t* data() const { return raw_.get() + misalign_; }
  size_t size() const { return size_; }

 private:
  struct Free {
    void operator()(uint8_t* p) const { std::free(p); }
  };
  std::unique_ptr<uint8_t, Free> raw_;
  size_t size_;
  size_t misalign_;
};

// True when `data` holds exactly the bytes of chunk `id`.
inline bool HoldsChunk(const ChunkId& id, const uint8_t* data, size_t size) {
  std::vector<uint8_t> want(size);
  FillPayload(id, want.data(), size);
  return std::memcmp(want.data(), data, size) == 0;
}

// A fresh directory under TMPDIR (or /tmp) removed by its destructor.
class TempDir {
 public:
  TempDir() {
    const char* base = std::getenv("TMPDIR");
    std::string pattern = std::string(base ? base : "/tmp") + "/kvstash-tiers-XXXXXX";
    path_ = ::mkdtemp(pattern.data()) ? pattern : "";
  }
  ~TempDir() {
    if (!path_.empty()) std::system(("rm -rf '" + path_ + "'").c_str());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
};

}  // namespace kvstash::tiers::testing
