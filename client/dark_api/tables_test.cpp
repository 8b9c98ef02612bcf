// The shape of every table: the slot counts the CUDA 13.0 stack was observed to get, the size
// word, no NULL slot, stubs that refuse instead of crashing, unknown UUIDs refused.
#include <gtest/gtest.h>

#include <cstring>
#include <map>
#include <string>

#include "client/dark_api/dark_api.h"
#include "client/dark_api/test_util.h"

namespace rgpu::client::dark {
namespace {

TEST(ExportTables, HaveTheSlotCountsObservedOnCuda13) {
  // docs/reference/cuda13-observed/README.md ("words"); CONTEXT_LOCAL_STORAGE, CTX_CREATE_BYPASS
  // and HEAP_ACCESS from dark-api.md; DEVICE_EXTENDED_RT as driver 580.159.04 answered when probed.
  const std::map<std::string, unsigned> expected = {
      {"f8cff95121468b4eb9e2fb469e7c0dd9", 3},  {"6bd5fb6c5bf4e74a8987d93912fd9df9", 13},
      {"a094798c2e742e7493f20800200c0a66", 7},  {"42d85a8123f6cb478298f6e78a3aecdc", 3},
      {"c693336e1121df11a8c368f355d89593", 4},  {"263e88607cd2614392f6bbd5006dfa7e", 15},
      {"d4082055bde6704b8d34ba123c66e1f2", 3},  {"21318c60971432488ca641ff7324c8f2", 93},
      {"1734dc26800d47458726c0f1e7dd8bca", 17}, {"da9151d33ae6cc41a5c04f26d533e328", 7},
      {"6e163fbeb958444d835ce182aff1991e", 99}, {"69a28e9f24498b47b030c5da330ea4e9", 34},
      {"0ca50b8c1004929a89a7d0df10e77286", 2},  {"195bcbf4d67d024aacc51d29cea631ae", 3},
      {"b10541e1f7c7c74a9f64f223be99f1e2", 31},
  };
  ASSERT_EQ(all_tables().size(), expected.size());
  for (const auto& t : all_tables()) {
    auto it = expected.find(uuid_hex(t.uuid));
    ASSERT_NE(it, expected.end()) << t.name;
    EXPECT_EQ(t.words, it->second) << t.name;
  }
}

TEST(ExportTables, SlotZeroIsTheSizeInBytesExceptInContextLocalStorage) {
  for (const auto& t : all_tables()) {
    const void* table = nullptr;
    ASSERT_EQ(cuGetExportTable(&table, &t.uuid), CUDA_SUCCESS) << t.name;
    ASSERT_EQ(table, t.table()) << t.name;
    auto slot0 = reinterpret_cast<uintptr_t>(static_cast<const void* const*>(table)[0]);
    if (t.size_word)
      EXPECT_EQ(slot0, t.words * sizeof(void*)) << t.name;
    else
      EXPECT_GT(slot0, 4096u) << t.name << ": slot 0 should be a function";
  }
  EXPECT_FALSE(spec(TableId::kContextLocalStorage).size_word);
}

TEST(ExportTables, NoSlotIsNull) {
  for (const auto& t : all_tables()) {
    auto table = static_cast<const void* const*>(t.table());
    for (unsigned i = 0; i < t.words; ++i) EXPECT_NE(table[i], nullptr) << t.name << " slot " << i;
  }
}

TEST(ExportTables, AreTheSameObjectOnEveryRequest) {
  for (const auto& t : all_tables()) {
    const void* a = nullptr;
    const void* b = nullptr;
    cuGetExportTable(&a, &t.uuid);
    cuGetExportTable(&b, &t.uuid);
    EXPECT_EQ(a, b) << t.name;
  }
}

TEST(ExportTables, UnimplementedSlotsRefuseWithNotSupported) {
  using AnySlot = CUresult (*)(void*, void*, void*, void*, void*, void*);
  int scratch[64] = {};
  for (auto [id, slot] : {std::pair{TableId::kToolsContext, 40u}, {TableId::kToolsContext, 50u},
                          {TableId::kToolsModule, 8u}, {TableId::kNvrtcCache, 5u}, {TableId::kCublasLt1734, 5u},
                          {TableId::kHeapAccess, 1u}, {TableId::kCtxCreateBypass, 1u}, {TableId::kCudartF8cf, 2u}}) {
    auto fn = testing::slot<AnySlot>(id, slot);
    // Twice: the second call is silent but refuses the same way.
    EXPECT_EQ(fn(scratch, scratch, scratch, scratch, scratch, scratch), CUDA_ERROR_NOT_SUPPORTED) << spec(id).name;
    EXPECT_EQ(fn(scratch, scratch, scratch, scratch, scratch, scratch), CUDA_ERROR_NOT_SUPPORTED) << spec(id).name;
  }
  for (int v : scratch) EXPECT_EQ(v, 0) << "a stub wrote through its arguments";
}

TEST(ExportTables, UnknownUuidIsRefusedWithNotSupported) {
  CUuuid unknown;
  std::memset(unknown.bytes, 0x5a, sizeof unknown.bytes);
  const void* table = reinterpret_cast<const void*>(1);
  EXPECT_EQ(cuGetExportTable(&table, &unknown), CUDA_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(table, nullptr);
  EXPECT_EQ(cuGetExportTable(nullptr, &unknown), CUDA_ERROR_INVALID_VALUE);
  EXPECT_EQ(cuGetExportTable(&table, nullptr), CUDA_ERROR_INVALID_VALUE);
}

TEST(ToolsHooks, HandOutZeroedBuffersOfTheObservedSizes) {
  using Hook = void* (*)(void**, size_t*);
  void* buf = nullptr;
  size_t size = 0;
  EXPECT_EQ(testing::slot<Hook>(TableId::kToolsRuntimeCallbackHooks, 2)(&buf, &size), buf);
  EXPECT_EQ(size, 1024u);
  ASSERT_NE(buf, nullptr);
  for (size_t i = 0; i < size; ++i) EXPECT_EQ(static_cast<const uint32_t*>(buf)[i], 0u);
  EXPECT_EQ(testing::slot<Hook>(TableId::kToolsRuntimeCallbackHooks, 6)(&buf, &size), buf);
  EXPECT_EQ(size, 14u);
}

TEST(ContextChecks, ReportNoFlags) {
  unsigned flags = 7;
  void* other = nullptr;
  using Check = CUresult (*)(CUcontext, unsigned*, void**);
  EXPECT_EQ(testing::slot<Check>(TableId::kContextChecks, 2)(nullptr, &flags, &other), CUDA_SUCCESS);
  EXPECT_EQ(flags, 0u);
  EXPECT_EQ(testing::slot<CUresult (*)()>(TableId::kContextChecks, 3)(), CUDA_SUCCESS);
}

TEST(CudartInterface, NoOpSlotsSucceed) {
  EXPECT_EQ(testing::slot<CUresult (*)(size_t)>(TableId::kCudartInterface, 7)(0), CUDA_SUCCESS);
  EXPECT_EQ(testing::slot<CUresult (*)()>(TableId::kCudartInterface, 12)(), CUDA_SUCCESS);
}

TEST(CudartInterface, PrimaryContextSlotRetainsTheDevicesPrimaryContext) {
  ASSERT_TRUE(testing::connect_to_fake_server());
  CUcontext from_slot = nullptr, from_api = nullptr;
  using Primary = CUresult (*)(CUcontext*, CUdevice);
  ASSERT_EQ(testing::slot<Primary>(TableId::kCudartInterface, 2)(&from_slot, 0), CUDA_SUCCESS);
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&from_api, 0), CUDA_SUCCESS);
  EXPECT_NE(from_slot, nullptr);
  EXPECT_EQ(from_slot, from_api);
}

TEST(DeviceExtendedRt, AttributeSlotAnswersLikeCuDeviceGetAttribute) {
  ASSERT_TRUE(testing::connect_to_fake_server());
  int sms = 0;
  ASSERT_EQ(cuDeviceGetAttribute(&sms, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0), CUDA_SUCCESS);
  size_t out[2] = {99, 99};
  using Attr = CUresult (*)(CUdevice, int, int, size_t*);
  ASSERT_EQ(testing::slot<Attr>(TableId::kDeviceExtendedRt, 5)(0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 0, out),
            CUDA_SUCCESS);
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(out[1], static_cast<size_t>(sms));
  ASSERT_EQ(testing::slot<Attr>(TableId::kDeviceExtendedRt, 5)(0, CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT, 1, out),
            CUDA_SUCCESS);
  EXPECT_EQ(out[0], 1u);
  EXPECT_EQ(out[1], 0u);
  unsigned char byte = 9;
  EXPECT_EQ(testing::slot<CUresult (*)(unsigned char*, CUdevice)>(TableId::kDeviceExtendedRt, 13)(&byte, 0),
            CUDA_SUCCESS);
  EXPECT_EQ(byte, 0);
}

TEST(ToolsContext, NumbersContextsFromOneAndKeepsTheirNumbers) {
  using Number = CUresult (*)(CUcontext, uint64_t*);
  auto number = testing::slot<Number>(TableId::kToolsContext, 4);
  auto a = reinterpret_cast<CUcontext>(0x1000), b = reinterpret_cast<CUcontext>(0x2000);
  uint64_t na = 0, nb = 0, na2 = 0;
  ASSERT_EQ(number(a, &na), CUDA_SUCCESS);
  ASSERT_EQ(number(b, &nb), CUDA_SUCCESS);
  ASSERT_EQ(number(a, &na2), CUDA_SUCCESS);
  EXPECT_GE(na, 1u);
  EXPECT_NE(na, nb);
  EXPECT_EQ(na, na2);
  on_context_destroyed(a);
  ASSERT_EQ(number(a, &na2), CUDA_SUCCESS);
  EXPECT_NE(na2, na) << "a destroyed context's handle reused for a new context gets a new number";
  uint64_t none = 99;
  ASSERT_EQ(number(nullptr, &none), CUDA_SUCCESS);
  EXPECT_EQ(none, 0u) << "the real driver answers 0 for a NULL context";
}

TEST(ToolsContext, DeviceSlotNamesTheContextsDevice) {
  ASSERT_TRUE(testing::connect_to_fake_server());
  CUcontext ctx = nullptr;
  ASSERT_EQ(cuDevicePrimaryCtxRetain(&ctx, 0), CUDA_SUCCESS);
  CUdevice dev = -1;
  ASSERT_EQ(testing::slot<CUresult (*)(CUcontext, CUdevice*)>(TableId::kToolsContext, 3)(ctx, &dev), CUDA_SUCCESS);
  EXPECT_EQ(dev, 0);
}

}  // namespace
}  // namespace rgpu::client::dark
