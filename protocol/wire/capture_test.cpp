// protocol/wire/capture.h: capture info, begin-to-graph and dependency updates survive the trip.
#include "protocol/wire/capture.h"

#include <gtest/gtest.h>

namespace rgpu::proto::wire {
namespace {

TEST(WireCapture, CaptureInfoRoundTripsWithAndWithoutEdges) {
  for (bool want_edges : {false, true}) {
    Writer w;
    put_capture_info_ask(w, {5, want_edges});
    CaptureInfo v;
    v.status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
    v.id = 9;
    v.graph = 10;
    v.nodes = {1, 2, 3};
    if (want_edges) v.edges.resize(3);
    put_capture_info(w, want_edges, v);
    Reader r(w.buf().data(), w.buf().size());
    CaptureInfoAsk ask;
    CaptureInfo got;
    ASSERT_TRUE(read_capture_info_ask(r, &ask));
    EXPECT_EQ(ask.stream, 5u);
    EXPECT_EQ(ask.want_edges, want_edges);
    ASSERT_TRUE(read_capture_info(r, want_edges, &got));
    EXPECT_EQ(r.left(), 0u);
    EXPECT_EQ(got.status, CU_STREAM_CAPTURE_STATUS_ACTIVE);
    EXPECT_EQ(got.id, 9u);
    EXPECT_EQ(got.graph, 10u);
    EXPECT_EQ(got.nodes, v.nodes);
    EXPECT_EQ(got.edges.size(), want_edges ? 3u : 0u);
  }
}

TEST(WireCapture, MoreDependenciesThanTheLimitAreRefused) {
  Writer w;
  w.put<int32_t>(1);
  w.put_u64(1);
  w.put_u64(1);
  w.put_u64(kMaxCaptureDependencies + 1);
  Reader r(w.buf().data(), w.buf().size());
  CaptureInfo got;
  EXPECT_FALSE(read_capture_info(r, false, &got));
}

TEST(WireCapture, BeginToGraphAndUpdateDependenciesRoundTrip) {
  CUgraphNode deps[2] = {reinterpret_cast<CUgraphNode>(7), reinterpret_cast<CUgraphNode>(8)};
  Writer w;
  put_begin_capture_to_graph(w, 1, 2, deps, nullptr, 2, CU_STREAM_CAPTURE_MODE_RELAXED);
  put_update_capture_dependencies(w, 3, deps, nullptr, 1, CU_STREAM_SET_CAPTURE_DEPENDENCIES);
  Reader r(w.buf().data(), w.buf().size());
  BeginCaptureToGraph b;
  ASSERT_TRUE(read_begin_capture_to_graph(r, &b));
  EXPECT_EQ(b.stream, 1u);
  EXPECT_EQ(b.graph, 2u);
  EXPECT_EQ(b.deps.nodes, (std::vector<uint64_t>{7, 8}));
  EXPECT_EQ(b.mode, static_cast<uint32_t>(CU_STREAM_CAPTURE_MODE_RELAXED));
  UpdateCaptureDependencies u;
  ASSERT_TRUE(read_update_capture_dependencies(r, &u));
  EXPECT_EQ(u.stream, 3u);
  EXPECT_EQ(u.deps.nodes, std::vector<uint64_t>{7});
  EXPECT_EQ(u.flags, static_cast<uint32_t>(CU_STREAM_SET_CAPTURE_DEPENDENCIES));
  EXPECT_EQ(r.left(), 0u);
  for (size_t n = 0; n + 1 < w.buf().size(); ++n) {
    Reader t(w.buf().data(), n);
    BeginCaptureToGraph x;
    UpdateCaptureDependencies y;
    EXPECT_FALSE(read_begin_capture_to_graph(t, &x) && read_update_capture_dependencies(t, &y));
  }
}

}  // namespace
}  // namespace rgpu::proto::wire
