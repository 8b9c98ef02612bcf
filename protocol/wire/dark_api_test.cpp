// protocol/wire/dark_api.h: the export-table ops and their replies survive the trip, and the
// readers refuse what the limits do not allow.
#include "protocol/wire/dark_api.h"

#include <gtest/gtest.h>

#include <cstring>

#include "protocol/messages.h"
#include "protocol/wire/module.h"

namespace rgpu::proto::wire {
namespace {

TEST(WireDarkApi, AToolsContextAskAndItsValueRoundTrip) {
  Writer w;
  put_tools_context_ask(w, {0x1001, 2});
  put_tools_context_value(w, {999, 0x123456789abcull});
  Reader r(w.buf().data(), w.buf().size());
  ToolsContextAsk ask;
  ToolsContextValue value;
  ASSERT_TRUE(read_tools_context_ask(r, &ask));
  ASSERT_TRUE(read_tools_context_value(r, &value));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(ask.context, 0x1001u);
  EXPECT_EQ(ask.stream, 2u);
  EXPECT_EQ(value.query_result, 999);
  EXPECT_EQ(value.value, 0x123456789abcull);
}

TEST(WireDarkApi, AToolsContextAskWithoutAStreamMeansTheNullStream) {
  Writer w;
  w.put_u64(0x1001);  // a client older than the stream field
  Reader r(w.buf().data(), w.buf().size());
  ToolsContextAsk ask{0, 7};
  ASSERT_TRUE(read_tools_context_ask(r, &ask));
  EXPECT_EQ(ask.context, 0x1001u);
  EXPECT_EQ(ask.stream, 0u);
}

TEST(WireDarkApi, ModuleFunctionNamesRoundTripAndHostileCountsAreRefused) {
  Writer w;
  put_module_functions_ask(w, {0, 0x2000});
  put_function_names(w, {"kernel_a", "", "kernel_b"});
  Reader r(w.buf().data(), w.buf().size());
  ModuleFunctionsAsk ask;
  std::vector<std::string> names;
  ASSERT_TRUE(read_module_functions_ask(r, &ask));
  ASSERT_TRUE(read_function_names(r, &names));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(ask.module, 0x2000u);
  EXPECT_EQ(names, (std::vector<std::string>{"kernel_a", "", "kernel_b"}));
  Writer count;  // four billion names in four bytes
  count.put_u32(0xffffffffu);
  Reader rc(count.buf().data(), count.buf().size());
  EXPECT_FALSE(read_function_names(rc, &names));
  Writer longname;
  put_function_names(longname, {std::string(kMaxSymbolName + 1, 'x')});
  Reader rl(longname.buf().data(), longname.buf().size());
  EXPECT_FALSE(read_function_names(rl, &names));
}

TEST(WireDarkApi, ClusterTopologyBytesRoundTripUpToTheLimit) {
  const uint8_t bytes[3] = {4, 4, 3};
  Writer w;
  put_context_ask(w, 0x1001);
  put_cluster_topology(w, bytes, 3);
  put_cluster_topology(w, nullptr, 0);
  Reader r(w.buf().data(), w.buf().size());
  uint64_t ctx = 0;
  std::vector<uint8_t> got, none;
  ASSERT_TRUE(read_context_ask(r, &ctx));
  ASSERT_TRUE(read_cluster_topology(r, &got));
  ASSERT_TRUE(read_cluster_topology(r, &none));
  EXPECT_EQ(r.left(), 0u);
  EXPECT_EQ(ctx, 0x1001u);
  EXPECT_EQ(got, (std::vector<uint8_t>{4, 4, 3}));
  EXPECT_TRUE(none.empty());
  Writer big;
  big.put_u32(kMaxClusterTopology + 1);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_cluster_topology(rb, &got));
}

TEST(WireDarkApi, AnExportTableAskCarriesTheUuidAndTheReplyItsFirstWord) {
  CUuuid id;
  for (int i = 0; i < 16; ++i) id.bytes[i] = static_cast<char>(i * 17);
  Writer w;
  put_export_table_ask(w, id);
  EXPECT_EQ(w.buf().size(), 16u);
  put_export_table_word(w, 0x1f8);
  Reader r(w.buf().data(), w.buf().size());
  CUuuid got{};
  uint64_t first = 0;
  ASSERT_TRUE(read_export_table_ask(r, &got));
  ASSERT_TRUE(read_export_table_word(r, &first));
  EXPECT_EQ(std::memcmp(got.bytes, id.bytes, 16), 0);
  EXPECT_EQ(first, 0x1f8u);
  Reader short_ask(w.buf().data(), 15);
  EXPECT_FALSE(read_export_table_ask(short_ask, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
