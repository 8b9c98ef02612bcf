// The few cryptographic primitives rgpu needs, from OpenSSL: HMAC-SHA256 for the token
// challenge (protocol/handshake.h), SHA-256 for content addresses, random nonces, and X25519 for
// the per-session secret that authenticates a resume (protocol/channel.h).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace rgpu::crypto {

using Digest = std::array<uint8_t, 32>;

Digest hmac_sha256(std::string_view key, const void* data, size_t len);
Digest sha256(const void* data, size_t len);
// Fills buf from the OS's cryptographic generator. Aborts if none is available.
void random_bytes(void* buf, size_t len);
// Lowercase hex of bytes (content addresses in file names and cache keys).
std::string hex(const void* data, size_t len);
// Compares in time independent of where the inputs differ.
bool equal_constant_time(const void* a, const void* b, size_t len);

// X25519 key agreement: each side sends its public key, and both compute the same shared value,
// which someone who saw both public keys cannot.
struct KeyPair {
  std::array<uint8_t, 32> public_key{};
  std::array<uint8_t, 32> private_key{};
};
KeyPair x25519_keypair();
// False when the peer's public key is unusable (a low-order point gives an all-zero result).
bool x25519_shared(const std::array<uint8_t, 32>& private_key, const std::array<uint8_t, 32>& peer_public,
                   Digest* shared);

}  // namespace rgpu::crypto
