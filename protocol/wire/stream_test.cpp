// protocol/wire/stream.h: host callbacks and stream attributes survive the trip.
#include "protocol/wire/stream.h"

#include <gtest/gtest.h>

namespace rgpu::proto::wire {
namespace {

TEST(WireStream, HostCallbacksCarryFlagsOnlyInTheirForm) {
  for (bool with_flags : {false, true}) {
    Writer w;
    put_host_callback(w, with_flags, {3, 99, 7});
    EXPECT_EQ(w.buf().size(), with_flags ? 20u : 16u);
    Reader r(w.buf().data(), w.buf().size());
    HostCallback got;
    ASSERT_TRUE(read_host_callback(r, with_flags, &got));
    EXPECT_EQ(got.stream, 3u);
    EXPECT_EQ(got.id, 99u);
    EXPECT_EQ(got.flags, with_flags ? 7u : 0u);
  }
}

TEST(WireStream, StreamAttributesRoundTripAndOnlyStreamIdsAreValid) {
  StreamAttribute v;
  v.stream = 2;
  v.attr = CU_LAUNCH_ATTRIBUTE_PRIORITY;
  v.value.priority = -1;
  Writer w;
  put_stream_attribute(w, true, v);
  put_stream_attribute_value(w, v.value);
  Reader r(w.buf().data(), w.buf().size());
  StreamAttribute got;
  CUstreamAttrValue back;
  ASSERT_TRUE(read_stream_attribute(r, true, &got));
  ASSERT_TRUE(read_stream_attribute_value(r, &back));
  EXPECT_EQ(got.stream, 2u);
  EXPECT_EQ(got.attr, CU_LAUNCH_ATTRIBUTE_PRIORITY);
  EXPECT_EQ(got.value.priority, -1);
  EXPECT_EQ(back.priority, -1);
  EXPECT_TRUE(stream_attribute(CU_LAUNCH_ATTRIBUTE_ACCESS_POLICY_WINDOW));
  EXPECT_FALSE(stream_attribute(CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_EVENT));  // its event would need translating
  EXPECT_FALSE(stream_attribute(-1));
  Reader cut(w.buf().data(), 11);
  EXPECT_FALSE(read_stream_attribute(cut, false, &got));
}

}  // namespace
}  // namespace rgpu::proto::wire
