// OpenSSL-backed implementation of common/crypto.h.
#include "common/crypto.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/rand.h>

#include <cstdlib>

#include "common/log.h"

namespace rgpu::crypto {

Digest hmac_sha256(std::string_view key, const void* data, size_t len) {
  Digest out{};
  unsigned int out_len = 0;
  HMAC(EVP_sha256(), key.data(), static_cast<int>(key.size()), static_cast<const unsigned char*>(data), len,
       out.data(), &out_len);
  return out;
}

Digest sha256(const void* data, size_t len) {
  Digest out{};
  unsigned int out_len = 0;
  EVP_Digest(data, len, out.data(), &out_len, EVP_sha256(), nullptr);
  return out;
}

void random_bytes(void* buf, size_t len) {
  if (RAND_bytes(static_cast<unsigned char*>(buf), static_cast<int>(len)) != 1) {
    log::error("cannot read random bytes from OpenSSL; the system's entropy source is unavailable");
    std::abort();
  }
}

std::string hex(const void* data, size_t len) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string s;
  s.reserve(2 * len);
  for (size_t i = 0; i < len; ++i) {
    const uint8_t b = static_cast<const uint8_t*>(data)[i];
    s += kDigits[b >> 4];
    s += kDigits[b & 15];
  }
  return s;
}

bool equal_constant_time(const void* a, const void* b, size_t len) { return CRYPTO_memcmp(a, b, len) == 0; }

}  // namespace rgpu::crypto
