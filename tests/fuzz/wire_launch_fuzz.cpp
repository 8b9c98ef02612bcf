// Fuzz target for protocol/wire/launch.h: the server decodes every kernel launch the client sends,
// so any bytes must decode or be refused without reading past the end or allocating past the
// limits, and binding the arguments must never point past the packed bytes. The first byte picks
// the message: a launch (bit 0: cuLaunchKernelEx, with attributes), or with bit 1 set the
// parameter and attribute queries (bits 2-3 pick which). What decodes must re-encode to bytes that
// decode and re-encode to the same bytes again.
#include <cuda.h>

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "common/wire.h"
#include "protocol/wire/launch.h"
#include "tests/fuzz/wire_fuzz.h"

namespace {

using namespace rgpu::proto::wire;
using rgpu::Reader;
using rgpu::Writer;

bool decode_query(uint8_t k, Reader& r, Writer* out) {
  switch ((k >> 2) & 3) {
    case 0: {
      ParamInfo q;
      uint64_t offset, size;
      if (!read_param_info(r, &q) || !read_param_info_reply(r, &offset, &size)) return false;
      put_param_info(*out, q);
      put_param_info_reply(*out, offset, size);
      return true;
    }
    case 1: {
      ParamLayoutAsk q;
      ParamLayout m;
      if (!read_param_layout_ask(r, &q) || !read_param_layout(r, &m)) return false;
      if (m.answered > 1) abort();
      put_param_layout_ask(*out, q);
      put_param_layout(*out, m);
      return true;
    }
    default: {
      FuncAttributesAsk q;
      std::vector<FuncAttribute> m;
      if (!read_func_attributes_ask(r, &q) || !read_func_attributes(r, &m)) return false;
      put_func_attributes_ask(*out, q);
      put_func_attributes(*out, m);
      return true;
    }
  }
}

bool decode_encode(uint8_t k, Reader& r, Writer* out) {
  if (k & 2) return decode_query(k, r, out);
  const bool with_attrs = k & 1;
  Launch m;
  if (!read_launch(r, &m, with_attrs)) return false;
  if (with_attrs)
    put_launch_ex_head(*out, m.function, m.dims, m.stream, m.attrs.data(), static_cast<uint32_t>(m.attrs.size()));
  else
    put_launch_head(*out, m.function, m.dims, m.stream);
  if (m.args.slots.empty() && m.args.packed_len) {
    put_extra_args(*out, m.args.packed, m.args.packed_len);
  } else {
    size_t at = put_packed_args(*out, m.args.slots, m.args.packed_len);
    if (m.args.packed_len) std::memcpy(out->buf().data() + at, m.args.packed, m.args.packed_len);
  }
  if (m.args.bind()) {
    // Every bound pointer lies inside the packed bytes, with its whole slot.
    for (size_t i = 0; i < m.args.ptrs.size(); ++i) {
      auto* p = static_cast<const uint8_t*>(m.args.ptrs[i]);
      if (p < m.args.packed || p + m.args.slots[i].size > m.args.packed + m.args.packed_len) abort();
    }
  }
  return true;
}

}  // namespace

RGPU_WIRE_FUZZ_TARGET(decode_encode)

void rgpu_fuzz_seeds(std::vector<std::vector<uint8_t>>* out) {
  const rgpu::fuzz::Seeds seed(out);
  Writer plain;
  put_launch_head(plain, 1, LaunchDims{{1, 1, 1}, {32, 1, 1}, 0}, 2);
  put_packed_args(plain, std::vector<ParamSlot>{{0, 4}, {8, 8}}, 16);
  seed(0, plain);
  Writer ex;
  CUlaunchAttribute attrs[2]{};
  attrs[0].id = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  put_launch_ex_head(ex, 1, LaunchDims{{2, 1, 1}, {64, 1, 1}, 128}, 2, attrs, 2);
  put_extra_args(ex, "abcdefgh", 8);
  seed(1, ex);
  Writer info, layout, fattrs;
  put_param_info(info, {1, 0});
  put_param_info_reply(info, 0, 8);
  seed(2, info);
  put_param_layout_ask(layout, {1, 2});
  put_param_layout(layout, {{{0, 8}}, 1, 0});
  seed(2 | 4, layout);
  put_func_attributes_ask(fattrs, {1, 0, 0});
  put_func_attributes(fattrs, {{0, 0, 1024}});
  seed(2 | 8, fattrs);
}
