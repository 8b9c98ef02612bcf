// protocol/wire/memory.h: VMM, pool and pointer-attribute messages survive the trip, never with a
// pointer from the wire.
#include "protocol/wire/memory.h"

#include <gtest/gtest.h>

#include <cstring>

#include "protocol/pointer_attributes.h"

namespace rgpu::proto::wire {
namespace {

TEST(WireMemory, AllocationPropsTravelWithoutTheirWindowsPointer) {
  CUmemAllocationProp p{};
  p.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  p.location = {CU_MEM_LOCATION_TYPE_DEVICE, 1};
  p.win32HandleMetaData = reinterpret_cast<void*>(0x1234);
  Writer w;
  put_granularity(w, {p, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED});
  put_mem_create(w, {1 << 21, p, 0});
  put_allocation_prop(w, p);
  Reader r(w.buf().data(), w.buf().size());
  Granularity g;
  MemCreate c;
  CUmemAllocationProp back;
  ASSERT_TRUE(read_granularity(r, &g));
  ASSERT_TRUE(read_mem_create(r, &c));
  ASSERT_TRUE(read_allocation_prop(r, &back));
  EXPECT_EQ(g.option, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  EXPECT_EQ(c.size, 1u << 21);
  for (const CUmemAllocationProp* q : {&g.prop, &c.prop, &back}) {
    EXPECT_EQ(q->win32HandleMetaData, nullptr);
    EXPECT_EQ(q->location.id, 1);
    EXPECT_EQ(q->type, CU_MEM_ALLOCATION_TYPE_PINNED);
  }
}

TEST(WireMemory, PoolsRoundTripAndOversizedValuesAreRefused) {
  CUmemPoolProps props{};
  props.allocType = CU_MEM_ALLOCATION_TYPE_PINNED;
  props.win32SecurityAttributes = reinterpret_cast<void*>(0x1);
  Writer w;
  put_pool_create(w, {7, props});
  PoolAttribute set{7, CU_MEMPOOL_ATTR_RELEASE_THRESHOLD, 8};
  uint64_t threshold = 1ull << 30;
  std::memcpy(set.value, &threshold, 8);
  put_pool_attribute(w, true, set);
  Reader r(w.buf().data(), w.buf().size());
  PoolCreate pc;
  PoolAttribute got;
  ASSERT_TRUE(read_pool_create(r, &pc));
  ASSERT_TRUE(read_pool_attribute(r, true, &got));
  EXPECT_EQ(pc.id, 7u);
  EXPECT_EQ(pc.props.win32SecurityAttributes, nullptr);
  EXPECT_EQ(got.size, 8u);
  EXPECT_EQ(std::memcmp(got.value, &threshold, 8), 0);
  EXPECT_EQ(pool_attribute_size(CU_MEMPOOL_ATTR_REUSE_ALLOW_OPPORTUNISTIC), 4u);
  EXPECT_EQ(pool_attribute_size(CU_MEMPOOL_ATTR_USED_MEM_HIGH), 8u);
  EXPECT_EQ(pool_attribute_size(0), 0u);
  Writer big;
  big.put_u64(1);
  big.put<int32_t>(CU_MEMPOOL_ATTR_RELEASE_THRESHOLD);
  big.put_u32(9);
  big.buf().resize(big.buf().size() + 9);
  Reader rb(big.buf().data(), big.buf().size());
  EXPECT_FALSE(read_pool_attribute(rb, true, &got));
}

TEST(WireMemory, PointerAttributesCheckCountsAndSizes) {
  CUpointer_attribute attrs[2] = {CU_POINTER_ATTRIBUTE_MEMORY_TYPE, CU_POINTER_ATTRIBUTE_CONTEXT};
  Writer w;
  put_pointer_attributes(w, 0xd000, attrs, 2);
  unsigned type = CU_MEMORYTYPE_DEVICE;
  uint64_t ctx = 5;
  put_pointer_attribute_value(w, CUDA_SUCCESS, &type, 4);
  put_pointer_attribute_value(w, CUDA_SUCCESS, &ctx, 8);
  Reader r(w.buf().data(), w.buf().size());
  PointerAttributes req;
  ASSERT_TRUE(read_pointer_attributes(r, false, &req));
  EXPECT_EQ(req.pointer, 0xd000u);
  ASSERT_EQ(req.attrs.size(), 2u);
  int32_t result;
  const uint8_t* value;
  uint32_t size;
  ASSERT_TRUE(read_pointer_attribute_value(r, req.attrs[0], &result, &value, &size));
  EXPECT_EQ(size, 4u);
  ASSERT_TRUE(read_pointer_attribute_value(r, req.attrs[1], &result, &value, &size));
  EXPECT_EQ(std::memcmp(value, &ctx, 8), 0);

  Writer two;
  put_pointer_attributes(two, 0, attrs, 2);
  Reader rt(two.buf().data(), two.buf().size());
  EXPECT_FALSE(read_pointer_attributes(rt, true, &req));  // cuPointerGetAttribute asks exactly one
  Writer none;
  put_pointer_attributes(none, 0, attrs, 0);
  Reader rn(none.buf().data(), none.buf().size());
  EXPECT_FALSE(read_pointer_attributes(rn, false, &req));
  Writer wrong;
  put_pointer_attribute_value(wrong, CUDA_SUCCESS, &ctx, 8);
  Reader rw(wrong.buf().data(), wrong.buf().size());
  EXPECT_FALSE(read_pointer_attribute_value(rw, CU_POINTER_ATTRIBUTE_MEMORY_TYPE, &result, &value, &size));
}

}  // namespace
}  // namespace rgpu::proto::wire
