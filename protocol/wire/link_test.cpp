// protocol/wire/link.h: a whole link and its result survive the trip; options a client of ours
// never sends are refused.
#include "protocol/wire/link.h"

#include <gtest/gtest.h>

#include <cstring>

namespace rgpu::proto::wire {
namespace {

TEST(WireLink, ALinkWithInputsAndItsResultRoundTrip) {
  CUjit_option opts[3] = {CU_JIT_INFO_LOG_BUFFER, CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES, CU_JIT_WALL_TIME};
  uint64_t values[3] = {0, 4096, 0};
  CUjit_option in_opts[1] = {CU_JIT_OPTIMIZATION_LEVEL};
  uint64_t in_values[1] = {3};
  Writer w;
  put_link_complete_head(w, 3, opts, values, 2);
  put_link_input(w, CU_JIT_INPUT_PTX, "a.ptx", 1, in_opts, in_values, ".version 8.0\0", 13);
  put_link_input(w, CU_JIT_INPUT_CUBIN, "b.cubin", 0, nullptr, nullptr, "\x7f" "ELF", 4);
  Reader r(w.buf().data(), w.buf().size());
  LinkComplete got;
  ASSERT_TRUE(read_link_complete(r, &got));
  EXPECT_EQ(r.left(), 0u);
  ASSERT_EQ(got.options.size(), 3u);
  EXPECT_EQ(got.options[1].option, static_cast<uint32_t>(CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES));
  EXPECT_EQ(got.options[1].value, 4096u);
  ASSERT_EQ(got.inputs.size(), 2u);
  EXPECT_EQ(got.inputs[0].name, "a.ptx");
  EXPECT_EQ(got.inputs[0].options[0].value, 3u);
  EXPECT_EQ(got.inputs[1].type, static_cast<uint32_t>(CU_JIT_INPUT_CUBIN));
  EXPECT_EQ(got.inputs[1].len, 4u);

  LinkResult res;
  res.slots = {0, 4096, 0x3f800000};
  res.info = "linked";
  res.error = "";
  res.cubin = reinterpret_cast<const uint8_t*>("CUBIN");
  res.cubin_len = 5;
  for (bool ok : {false, true}) {
    Writer rw;
    put_link_result(rw, ok, res);
    Reader rr(rw.buf().data(), rw.buf().size());
    LinkResult back;
    ASSERT_TRUE(read_link_result(rr, ok, &back));
    EXPECT_EQ(rr.left(), 0u);
    EXPECT_EQ(back.slots, res.slots);
    EXPECT_EQ(back.info, "linked");
    EXPECT_EQ(back.cubin_len, ok ? 5u : 0u);
  }
}

TEST(WireLink, OptionsAClientNeverSendsAreRefused) {
  auto refused = [](CUjit_option o, uint64_t v, bool in_input) {
    Writer w;
    if (in_input) {
      put_link_complete_head(w, 0, nullptr, nullptr, 1);
      put_link_input(w, CU_JIT_INPUT_PTX, "x", 1, &o, &v, "", 0);
    } else {
      put_link_complete_head(w, 1, &o, &v, 0);
    }
    Reader r(w.buf().data(), w.buf().size());
    LinkComplete got;
    return !read_link_complete(r, &got);
  };
  EXPECT_TRUE(refused(CU_JIT_GLOBAL_SYMBOL_NAMES, 0, false));          // host pointer arrays
  EXPECT_TRUE(refused(static_cast<CUjit_option>(CU_JIT_NUM_OPTIONS), 0, false));
  EXPECT_TRUE(refused(CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES, kMaxLinkLog + 1, false));
  EXPECT_TRUE(refused(CU_JIT_INFO_LOG_BUFFER, 0, true));               // an input's log buffer
  EXPECT_FALSE(refused(CU_JIT_INFO_LOG_BUFFER, 0, false));
  EXPECT_FALSE(refused(CU_JIT_OPTIMIZATION_LEVEL, 4, true));
  Writer bad_type;
  put_link_complete_head(bad_type, 0, nullptr, nullptr, 1);
  put_link_input(bad_type, CU_JIT_NUM_INPUT_TYPES, "x", 0, nullptr, nullptr, "", 0);
  Reader r(bad_type.buf().data(), bad_type.buf().size());
  LinkComplete got;
  EXPECT_FALSE(read_link_complete(r, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
