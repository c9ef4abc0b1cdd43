// Incremental SHA-256 over OpenSSL's EVP interface (internal to vocab).
#pragma once

#include <openssl/evp.h>

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string_view>

namespace kvstash::internal {

class Sha256 {
 public:
  Sha256() : ctx_(EVP_MD_CTX_new(), &EVP_MD_CTX_free) {
    EVP_DigestInit_ex(ctx_.get(), EVP_sha256(), nullptr);
  }
  void Update(const void* data, size_t size) { EVP_DigestUpdate(ctx_.get(), data, size); }
  void Update(std::string_view s) {
    UpdateU64(s.size());  // length-prefixed so adjacent fields cannot alias
    Update(s.data(), s.size());
  }
  void UpdateU32(uint32_t v) {
    uint8_t le[4] = {uint8_t(v), uint8_t(v >> 8), uint8_t(v >> 16), uint8_t(v >> 24)};
    Update(le, sizeof(le));
  }
  void UpdateU64(uint64_t v) {
    UpdateU32(uint32_t(v));
    UpdateU32(uint32_t(v >> 32));
  }
  std::array<uint8_t, 32> Finish() {
    std::array<uint8_t, 32> out{};
    unsigned int size = 0;
    EVP_DigestFinal_ex(ctx_.get(), out.data(), &size);
    return out;
  }

 private:
  std::unique_ptr<EVP_MD_CTX, decltype(&EVP_MD_CTX_free)> ctx_;
};

}  // namespace kvstash::internal
