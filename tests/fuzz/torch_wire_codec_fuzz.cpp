// Fuzz target for protocol/torch_wire.h's own decoders, torch-free, so that it builds (and runs in
// CI) where torch is not installed: get_desc and get_shape (tensor descriptions, which
// rgpu-opserver reads from the client and the client's fallback reads from output specs) and
// get_status (the reply prefix every client call reads from the server). The first byte picks the
// decoder. Any bytes must decode or be refused without reading past the end or sizing a vector
// past kMaxDims; what decodes must re-encode to bytes that decode and re-encode to the same bytes
// again. The session that decodes the rest of a frame (ATen values, storage changes) needs torch:
// opserver/torch_wire_fuzz.cpp.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "common/wire.h"
#include "protocol/torch_wire.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::torchwire;
using rgpu::Reader;
using rgpu::Writer;

void check_shape(const TensorDesc& d) {
  if (d.sizes.size() > kMaxDims || d.sizes.size() != d.strides.size()) abort();
}

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  switch (k % 3) {
    case 0: {
      TensorDesc d;
      if (!get_desc(r, &d)) return false;
      check_shape(d);
      put_desc(*out, d);
      return true;
    }
    case 1: {
      TensorDesc d;
      if (!get_shape(r, &d)) return false;
      check_shape(d);
      put_shape(*out, d.dtype, d.sizes.data(), d.strides.data(), d.sizes.size(), d.offset);
      return true;
    }
    default: {
      ReplyStatus s;
      if (!get_status(r, &s)) return false;
      if (s.deferred_kind >= kErrKindCount || s.kind >= kErrKindCount) abort();
      if (s.deferred_op.size() > kMaxNameString) abort();
      put_status(*out, s);
      return true;
    }
  }
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  TensorDesc d;
  d.storage = kFirstStorageId;
  d.dtype = 6;  // float
  d.sizes = {2, 3};
  d.strides = {3, 1};
  Writer desc, shape, ok, failed;
  put_desc(desc, d);
  seed(0, desc);
  put_shape(shape, d.dtype, d.sizes.data(), d.strides.data(), d.sizes.size(), 1);
  seed(1, shape);
  put_status(ok, ReplyStatus{});
  seed(2, ok);
  ReplyStatus s;
  s.has_deferred = true;
  s.deferred_op = "aten::add.Tensor";
  s.deferred_message = "The size of tensor a (2) must match the size of tensor b (3)";
  s.failed = true;
  s.message = "index 5 is out of bounds for dimension 0 with size 2";
  s.kind = kErrIndex;
  put_status(failed, s);
  seed(2, failed);
}
