// The few cryptographic primitives rgpu needs, from OpenSSL: HMAC-SHA256 for the token
// challenge (protocol/handshake.h), SHA-256 for content addresses, and random nonces.
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

}  // namespace rgpu::crypto
