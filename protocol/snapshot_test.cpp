// decode_snapshot (protocol/snapshot.h) on hostile replies: a valid snapshot round-trips, and a
// count larger than the bytes behind it is refused before it sizes anything.
#include "protocol/snapshot.h"

#include <gtest/gtest.h>

#include <array>
#include <vector>

#include <cuda.h>

#include "common/wire.h"

namespace rgpu::proto {
namespace {

Snapshot sample() {
  Snapshot s;
  s.init_result = 0;
  s.driver_version = 13000;
  DeviceInfo d;
  d.name = "NVIDIA H200";
  d.total_mem = 141ull << 30;
  d.pci_bus_id = "0000:19:00.0";
  d.attrs = {{0, 132}, {0, 1024}};
  s.devices = {d};
  s.errors = {{1, "CUDA_ERROR_INVALID_VALUE", "invalid argument"}};
  s.cached_modules.resize(2);
  s.module_cache_on = true;
  s.loading_mode = CU_MODULE_LAZY_LOADING;
  return s;
}

TEST(Snapshot, RoundTripsAValidSnapshot) {
  Writer w;
  encode_snapshot(sample(), w);
  Reader r(w.buf().data(), w.buf().size());
  Snapshot back;
  ASSERT_TRUE(decode_snapshot(r, &back));
  ASSERT_EQ(back.devices.size(), 1u);
  EXPECT_EQ(back.devices[0].name, "NVIDIA H200");
  EXPECT_EQ(back.devices[0].attrs.size(), 2u);
  EXPECT_EQ(back.errors.size(), 1u);
  EXPECT_EQ(back.cached_modules.size(), 2u);
  EXPECT_EQ(back.loading_mode, CU_MODULE_LAZY_LOADING);
}

// Seen in snapshot_fuzz's slow runs (3,800 exec/s): counts within the limits with nothing behind
// them made a 20-byte reply allocate megabytes (64 devices of 4096 attributes, 65536 module
// hashes) before failing.
TEST(Snapshot, RefusesCountsTheBytesBehindThemCannotHold) {
  struct Case {
    const char* what;
    void (*write)(Writer&);
  };
  const Case cases[] = {
      {"devices", [](Writer& w) { w.put_u32(kMaxSnapshotDevices); }},
      {"attributes",
       [](Writer& w) {
         w.put_u32(1), w.put_str(""), w.append(std::array<uint8_t, 16>{}.data(), 16), w.put_u64(0), w.put_str("");
         w.put_u32(kMaxSnapshotAttrs);
       }},
      {"errors", [](Writer& w) { w.put_u32(0), w.put_u32(kMaxSnapshotErrors); }},
      {"modules", [](Writer& w) { w.put_u32(0), w.put_u32(0), w.put_u32(kMaxSnapshotModules); }},
  };
  for (const Case& c : cases) {
    Writer w;
    w.put<int32_t>(0), w.put<int32_t>(13000);
    c.write(w);
    w.append(std::vector<uint8_t>(64, 0).data(), 64);  // some bytes, far fewer than the count needs
    Reader r(w.buf().data(), w.buf().size());
    Snapshot s;
    EXPECT_FALSE(decode_snapshot(r, &s)) << c.what;
    EXPECT_LE(s.devices.size() + s.errors.size() + s.cached_modules.size(), 2u) << c.what;
    for (const auto& d : s.devices) EXPECT_LE(d.attrs.size(), 8u) << c.what;
  }
}

}  // namespace
}  // namespace rgpu::proto
