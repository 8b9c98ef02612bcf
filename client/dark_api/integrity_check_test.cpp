// The integrity check: its fixed answers, the MD2 states published by public work for a known
// key and record (they pin the key, the inner pad and the record's field order), and the slot's
// output against an independent recomputation from the documented record layout.
#include "client/dark_api/integrity_check.h"

#include <gtest/gtest.h>
#include <pthread.h>
#include <unistd.h>

#include <cstring>
#include <thread>
#include <vector>

#include "client/dark_api/md2.h"
#include "client/dark_api/test_util.h"

namespace rgpu::client::dark {
namespace {

using Slot1 = CUresult (*)(unsigned, uint64_t, uint64_t*);

Slot1 integrity_slot() { return testing::slot<Slot1>(TableId::kIntegrityCheck, 1); }

TEST(IntegrityCheck, VersionsEndingInZeroGetTheFixedAnswer) {
  for (unsigned version : {0u, 10u, 12080u, 13000u}) {
    uint64_t r[2] = {};
    ASSERT_EQ(integrity_slot()(version, 0x682b9cee, r), CUDA_SUCCESS);
    EXPECT_EQ(r[0], 0x3341181C03CB675Cull) << version;
    EXPECT_EQ(r[1], 0x8ED383AA1F4CD1E8ull) << version;
  }
}

TEST(IntegrityCheck, VersionsEndingInOneGetTheOtherFixedAnswer) {
  for (unsigned version : {1u, 12081u, 13001u}) {
    uint64_t r[2] = {};
    ASSERT_EQ(integrity_slot()(version, 12345, r), CUDA_SUCCESS);
    EXPECT_EQ(r[0], 0x1841181C03CB675Cull) << version;
    EXPECT_EQ(r[1], 0x8ED383AA1F4CD1E8ull) << version;
  }
}

// MD2 states after the inner pad and after the record, as published by ZLUDA's tests of its own
// implementation (dark_api/src/lib.rs, integrity_check_pass2/pass3), which were taken from the
// real driver. They pin the key, the 0x36 pad and the record's layout and field order.
TEST(IntegrityCheck, MatchesThePublishedStatesForAKnownRecord) {
  Md2 h;
  uint8_t pad[16];
  for (int i = 0; i < 16; ++i) pad[i] = kIntegrityKey[static_cast<size_t>(i)] ^ 0x36;
  h.update(pad, 16);
  const uint8_t after_pad_state[16] = {0x8b, 0x21, 0x9a, 0x49, 0xe8, 0x6d, 0x1a, 0xee,
                                       0xf2, 0x37, 0xf9, 0xb5, 0x4a, 0x8c, 0x3c, 0x75};
  const uint8_t after_pad_sum[16] = {0x57, 0xa1, 0x10, 0x86, 0x0e, 0x60, 0x44, 0x1e,
                                     0x70, 0x5f, 0x67, 0xd1, 0xeb, 0x67, 0xa1, 0x3d};
  EXPECT_EQ(0, std::memcmp(h.state(), after_pad_state, 16));
  EXPECT_EQ(0, std::memcmp(h.checksum(), after_pad_sum, 16));

  // The record, written field by field from the documented layout.
  std::vector<uint8_t> rec;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) rec.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  put(0x2f30, 4);            // driver version 12080
  put(12082, 4);             // version
  put(0x002fa423, 4);        // process id
  put(0xf79c1000, 4);        // thread id
  put(0x7ffff6958240, 8);    // CUDART_INTERFACE table
  put(0x7ffff6958220, 8);    // INTEGRITY_CHECK table
  put(0x7ffff2aaf4a0, 8);    // slot 1
  put(0x682b9cee, 8);        // unix seconds
  ASSERT_EQ(rec.size(), 48u);
  h.update(rec.data(), rec.size());
  const uint8_t after_rec_state[16] = {0x0a, 0xfd, 0xab, 0xc9, 0xff, 0x9b, 0xa0, 0xbe,
                                       0x4d, 0x30, 0x32, 0x82, 0x74, 0x4f, 0xa7, 0x48};
  const uint8_t after_rec_sum[16] = {0x64, 0x28, 0xd9, 0xe1, 0xd4, 0x34, 0xc0, 0xa9,
                                     0x49, 0x88, 0xc9, 0x61, 0x58, 0xdd, 0x66, 0x74};
  EXPECT_EQ(0, std::memcmp(h.state(), after_rec_state, 16));
  EXPECT_EQ(0, std::memcmp(h.checksum(), after_rec_sum, 16));

  // And integrity_answer builds exactly that record from its inputs.
  IntegrityInputs in;
  in.driver_version = 0x2f30;
  in.process_id = 0x002fa423;
  in.thread_id = 0xf79c1000;
  in.cudart_interface_table = 0x7ffff6958240;
  in.integrity_check_table = 0x7ffff6958220;
  in.integrity_check_fn = 0x7ffff2aaf4a0;
  in.devices.push_back({{0x9a, 0xfe, 0x2b, 0x8a, 0xac, 0x25, 0x2d, 0x38, 0xea, 0x37, 0xae, 0xc5, 0x6d, 0x71, 0x32, 0x5f},
                        0, 2, 0});
  std::vector<uint8_t> msg = rec;
  msg.insert(msg.end(), in.devices[0].uuid, in.devices[0].uuid + 16);
  for (uint8_t b : {0, 0, 0, 0, 2, 0, 0, 0, 0, 0, 0, 0}) msg.push_back(b);  // domain 0, bus 2, device 0
  Md2Digest mac = hmac_md2(kIntegrityKey, msg.data(), msg.size());
  uint64_t expect[2];
  std::memcpy(expect, mac.data(), 16);
  auto got = integrity_answer(12082, 0x682b9cee, in);
  EXPECT_EQ(got[0], expect[0]);
  EXPECT_EQ(got[1], expect[1]);
}

// The slot's output, recomputed here from scratch: every input read back the way a checking
// library would read it (the shim's public entry points, the table addresses cuGetExportTable
// hands out, getpid, pthread_self).
std::array<uint64_t, 2> recompute(unsigned version, uint64_t unix_seconds) {
  std::vector<uint8_t> msg;
  auto put = [&](uint64_t v, int bytes) {
    for (int i = 0; i < bytes; ++i) msg.push_back(static_cast<uint8_t>(v >> (8 * i)));
  };
  int driver = 0;
  EXPECT_EQ(cuDriverGetVersion(&driver), CUDA_SUCCESS);
  const void* cudart = nullptr;
  const void* integrity = nullptr;
  EXPECT_EQ(cuGetExportTable(&cudart, &spec(TableId::kCudartInterface).uuid), CUDA_SUCCESS);
  EXPECT_EQ(cuGetExportTable(&integrity, &spec(TableId::kIntegrityCheck).uuid), CUDA_SUCCESS);
  put(static_cast<uint32_t>(driver), 4);
  put(version, 4);
  put(static_cast<uint32_t>(getpid()), 4);
  put(static_cast<uint32_t>(static_cast<uint64_t>(pthread_self())), 4);
  put(reinterpret_cast<uintptr_t>(cudart), 8);
  put(reinterpret_cast<uintptr_t>(integrity), 8);
  put(reinterpret_cast<uintptr_t>(static_cast<const void* const*>(integrity)[1]), 8);
  put(unix_seconds, 8);
  int count = 0;
  EXPECT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  for (int d = 0; d < count; ++d) {
    CUuuid uuid;
    EXPECT_EQ(cuDeviceGetUuid(&uuid, d), CUDA_SUCCESS);
    msg.insert(msg.end(), uuid.bytes, uuid.bytes + 16);
    for (auto attr : {CU_DEVICE_ATTRIBUTE_PCI_DOMAIN_ID, CU_DEVICE_ATTRIBUTE_PCI_BUS_ID, CU_DEVICE_ATTRIBUTE_PCI_DEVICE_ID}) {
      int v = -1;
      EXPECT_EQ(cuDeviceGetAttribute(&v, attr, d), CUDA_SUCCESS);
      put(static_cast<uint32_t>(v), 4);
    }
  }
  EXPECT_EQ(msg.size(), 48u + 28u * static_cast<size_t>(count));
  Md2Digest mac = hmac_md2(kIntegrityKey, msg.data(), msg.size());
  std::array<uint64_t, 2> out;
  std::memcpy(out.data(), mac.data(), 16);
  return out;
}

TEST(IntegrityCheck, SlotOutputEqualsTheRecordRecomputedFromItsDocumentedLayout) {
  ASSERT_TRUE(testing::connect_to_fake_server());
  int count = 0;
  ASSERT_EQ(cuDeviceGetCount(&count), CUDA_SUCCESS);
  ASSERT_GT(count, 0) << "the fake driver should show at least one device";
  for (unsigned version : {12082u, 13005u, 13009u}) {
    uint64_t r[2] = {};
    ASSERT_EQ(integrity_slot()(version, 0x692b9cee, r), CUDA_SUCCESS);
    auto expect = recompute(version, 0x692b9cee);
    EXPECT_EQ(r[0], expect[0]) << version;
    EXPECT_EQ(r[1], expect[1]) << version;
  }
}

TEST(IntegrityCheck, AnswerIsBoundToTheCallingThreadAndTheTime) {
  ASSERT_TRUE(testing::connect_to_fake_server());
  uint64_t here[2], later[2], there[2];
  ASSERT_EQ(integrity_slot()(13002, 1000, here), CUDA_SUCCESS);
  ASSERT_EQ(integrity_slot()(13002, 1001, later), CUDA_SUCCESS);
  std::array<uint64_t, 2> there_expect{};
  std::thread([&] {
    EXPECT_EQ(integrity_slot()(13002, 1000, there), CUDA_SUCCESS);
    there_expect = recompute(13002, 1000);
  }).join();
  EXPECT_NE(here[0], later[0]);
  EXPECT_NE(here[0], there[0]);
  EXPECT_EQ(there[0], there_expect[0]);
  EXPECT_EQ(there[1], there_expect[1]);
}

}  // namespace
}  // namespace rgpu::client::dark
