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

KeyPair x25519_keypair() {
  KeyPair kp;
  EVP_PKEY* key = nullptr;
  EVP_PKEY_CTX* ctx = EVP_PKEY_CTX_new_id(EVP_PKEY_X25519, nullptr);
  size_t n = 32;
  if (!ctx || EVP_PKEY_keygen_init(ctx) != 1 || EVP_PKEY_keygen(ctx, &key) != 1 ||
      EVP_PKEY_get_raw_public_key(key, kp.public_key.data(), &n) != 1 || n != 32 ||
      EVP_PKEY_get_raw_private_key(key, kp.private_key.data(), &n) != 1 || n != 32) {
    log::error("cannot make an X25519 key with OpenSSL; is the OpenSSL library complete?");
    std::abort();
  }
  EVP_PKEY_free(key);
  EVP_PKEY_CTX_free(ctx);
  return kp;
}

bool x25519_shared(const std::array<uint8_t, 32>& private_key, const std::array<uint8_t, 32>& peer_public,
                   Digest* shared) {
  EVP_PKEY* mine = EVP_PKEY_new_raw_private_key(EVP_PKEY_X25519, nullptr, private_key.data(), 32);
  EVP_PKEY* theirs = EVP_PKEY_new_raw_public_key(EVP_PKEY_X25519, nullptr, peer_public.data(), 32);
  EVP_PKEY_CTX* ctx = mine ? EVP_PKEY_CTX_new(mine, nullptr) : nullptr;
  size_t n = shared->size();
  bool ok = ctx && theirs && EVP_PKEY_derive_init(ctx) == 1 && EVP_PKEY_derive_set_peer(ctx, theirs) == 1 &&
            EVP_PKEY_derive(ctx, shared->data(), &n) == 1 && n == shared->size();
  EVP_PKEY_CTX_free(ctx);
  EVP_PKEY_free(theirs);
  EVP_PKEY_free(mine);
  return ok;
}

}  // namespace rgpu::crypto
