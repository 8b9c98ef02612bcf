// What every wire_*_fuzz target shares: the round trip its LLVMFuzzerTestOneInput runs and the way
// its seeds are written. A target supplies one function, decode_encode(k, r, out), that decodes
// the message the first input byte k picks from r and, when it decodes, encodes it again into
// out. Any bytes must decode or be refused without reading past the end (the bytes are copied to
// a buffer of their exact size, so ASan sees an over-read); what decodes must re-encode to bytes
// that decode, to the end, and re-encode to the same bytes again.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"

namespace rgpu::fuzz {

using DecodeEncode = bool (*)(uint8_t k, Reader& r, Writer* out);

inline int wire_round_trip(const uint8_t* data, size_t size, DecodeEncode decode_encode) {
  if (size < 1) return 0;
  std::vector<uint8_t> buf(data + 1, data + size);
  Reader r(buf.data(), buf.size());
  Writer once;
  if (!decode_encode(data[0], r, &once)) return 0;
  Reader again(once.buf().data(), once.buf().size());
  Writer twice;
  if (!decode_encode(data[0], again, &twice) || again.left() != 0 || once.buf() != twice.buf()) abort();
  return 0;
}

// The seed for message k: k, then what w holds.
class Seeds {
 public:
  explicit Seeds(std::vector<std::vector<uint8_t>>* out) : out_(out) {}
  void operator()(uint8_t k, Writer& w) const {
    std::vector<uint8_t> s{k};
    s.insert(s.end(), w.buf().begin(), w.buf().end());
    out_->push_back(std::move(s));
  }

 private:
  std::vector<std::vector<uint8_t>>* out_;
};

}  // namespace rgpu::fuzz

// The target's entry point, over its decode_encode.
#define RGPU_WIRE_FUZZ_TARGET(decode_encode)                                   \
  extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {     \
    return ::rgpu::fuzz::wire_round_trip(data, size, decode_encode);            \
  }
