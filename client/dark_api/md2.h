// MD2 (RFC 1319) and HMAC-MD2 (RFC 2104 with a 16-byte block): the hash the driver's integrity
// check is built on (integrity_check.cpp). Nothing else should use MD2.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>

namespace rgpu::client::dark {

using Md2Digest = std::array<uint8_t, 16>;

class Md2 {
 public:
  void update(const void* data, size_t n);
  // Pads, appends the checksum and returns the digest. The object is spent afterwards.
  Md2Digest finish();

  // The running state (X[0..16)) and checksum, exposed for tests that compare intermediate
  // states with published ones.
  const uint8_t* state() const { return x_; }
  const uint8_t* checksum() const { return checksum_; }

 private:
  void compress();
  uint8_t x_[48] = {};        // state, then the block, then state ^ block
  uint8_t checksum_[16] = {};
  uint8_t last_ = 0;          // L: the last checksum byte written
  unsigned fill_ = 0;         // bytes of the current block already in x_[16..32)
};

Md2Digest md2(const void* data, size_t n);

// HMAC-MD2 with a 16-byte key (MD2's block size, so the key is used as it is).
Md2Digest hmac_md2(const std::array<uint8_t, 16>& key, const void* msg, size_t n);

}  // namespace rgpu::client::dark
