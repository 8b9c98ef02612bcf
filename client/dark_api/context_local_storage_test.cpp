// CONTEXT_LOCAL_STORAGE semantics (context_local_storage.cpp): what "current" means, the errors
// the real driver returns (probed on driver 580.159.04), the per-thread cache never serving a
// stale value, destructors.
// Contexts here are only pushed on the client's own stack (client/contexts.h): the table never
// asks the server.
#include <gtest/gtest.h>

#include <thread>
#include <vector>

#include "client/contexts.h"
#include "client/dark_api/dark_api.h"
#include "client/dark_api/test_util.h"

namespace rgpu::client::dark {
namespace {

using Dtor = void (*)(CUcontext, void*, void*);
using Put = CUresult (*)(CUcontext, void*, void*, Dtor);
using Delete = CUresult (*)(CUcontext, void*);
using Get = CUresult (*)(void**, CUcontext, void*);

Put put() { return testing::slot<Put>(TableId::kContextLocalStorage, 0); }
Delete del() { return testing::slot<Delete>(TableId::kContextLocalStorage, 1); }
Get get() { return testing::slot<Get>(TableId::kContextLocalStorage, 2); }

void* P(uintptr_t v) { return reinterpret_cast<void*>(v); }
CUcontext C(uintptr_t v) { return reinterpret_cast<CUcontext>(v); }
const CUcontext kMinusOne = C(~uintptr_t{0});

struct DtorCall {
  CUcontext ctx;
  void* key;
  void* value;
};
std::vector<DtorCall> g_dtor_calls;
void record_dtor(CUcontext ctx, void* key, void* value) { g_dtor_calls.push_back({ctx, key, value}); }

class ContextLocalStorage : public ::testing::Test {
 protected:
  void SetUp() override {
    while (contexts::current()) contexts::pop();
    g_dtor_calls.clear();
  }
  void TearDown() override {
    while (contexts::current()) contexts::pop();
  }
};

TEST_F(ContextLocalStorage, WithoutACurrentContextEverySlotReturnsInvalidContext) {
  void* v = P(1);
  EXPECT_EQ(get()(&v, nullptr, P(0x10)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(get()(&v, kMinusOne, P(0x10)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(put()(nullptr, P(0x10), P(0x20), nullptr), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(del()(nullptr, P(0x10)), CUDA_ERROR_INVALID_CONTEXT);
  EXPECT_EQ(v, P(1));
}

TEST_F(ContextLocalStorage, AbsentKeyIsInvalidHandleAndLeavesTheValueAlone) {
  contexts::push(C(0xc1));
  void* v = P(0x77);
  EXPECT_EQ(get()(&v, nullptr, P(0x404)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(v, P(0x77));
  EXPECT_EQ(get()(&v, nullptr, P(0x404)), CUDA_ERROR_INVALID_HANDLE);  // cached miss, same answer
}

TEST_F(ContextLocalStorage, NullAndMinusOneMeanTheCurrentContext) {
  contexts::push(C(0xc2));
  ASSERT_EQ(put()(nullptr, P(0x10), P(0xaa), nullptr), CUDA_SUCCESS);
  void* v = nullptr;
  ASSERT_EQ(get()(&v, C(0xc2), P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0xaa));
  v = nullptr;
  ASSERT_EQ(get()(&v, kMinusOne, P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0xaa));
  ASSERT_EQ(put()(kMinusOne, P(0x11), P(0xbb), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(get()(&v, C(0xc2), P(0x11)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0xbb));
  on_context_destroyed(C(0xc2));
}

TEST_F(ContextLocalStorage, ValuesAreKeyedByContextAndKey) {
  ASSERT_EQ(put()(C(0xc3), P(0x10), P(1), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(put()(C(0xc4), P(0x10), P(2), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(put()(C(0xc3), P(0x20), P(3), nullptr), CUDA_SUCCESS);
  void* v = nullptr;
  ASSERT_EQ(get()(&v, C(0xc3), P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(1));
  ASSERT_EQ(get()(&v, C(0xc4), P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(2));
  ASSERT_EQ(get()(&v, C(0xc3), P(0x20)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(3));
  EXPECT_EQ(get()(&v, C(0xc4), P(0x20)), CUDA_ERROR_INVALID_HANDLE);
  on_context_destroyed(C(0xc3));
  on_context_destroyed(C(0xc4));
}

TEST_F(ContextLocalStorage, PutOfAPresentKeyIsInvalidHandleAndKeepsTheOldValue) {
  contexts::push(C(0xcd));
  ASSERT_EQ(put()(nullptr, P(0x10), P(0x99), nullptr), CUDA_SUCCESS);
  EXPECT_EQ(put()(nullptr, P(0x10), P(0xaa), nullptr), CUDA_ERROR_INVALID_HANDLE);
  void* v = nullptr;
  ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0x99));
  on_context_destroyed(C(0xcd));
}

TEST_F(ContextLocalStorage, GetNeverServesAStaleValueAfterPutOrDelete) {
  contexts::push(C(0xc5));
  void* v = nullptr;
  for (uintptr_t i = 1; i < 100; ++i) {
    ASSERT_EQ(put()(nullptr, P(0x10), P(i), nullptr), CUDA_SUCCESS);
    ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_SUCCESS);
    ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_SUCCESS);  // from the cache
    ASSERT_EQ(v, P(i));
    ASSERT_EQ(del()(nullptr, P(0x10)), CUDA_SUCCESS);
    ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_ERROR_INVALID_HANDLE);
  }
  // A change made by another thread is seen too.
  ASSERT_EQ(put()(nullptr, P(0x10), P(0x1234), nullptr), CUDA_SUCCESS);
  ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_SUCCESS);
  std::thread([] {
    EXPECT_EQ(del()(C(0xc5), P(0x10)), CUDA_SUCCESS);
    EXPECT_EQ(put()(C(0xc5), P(0x10), P(0x5678), nullptr), CUDA_SUCCESS);
  }).join();
  ASSERT_EQ(get()(&v, nullptr, P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0x5678));
  on_context_destroyed(C(0xc5));
}

TEST_F(ContextLocalStorage, EachThreadSeesItsOwnCurrentContext) {
  contexts::push(C(0xc6));
  ASSERT_EQ(put()(nullptr, P(0x10), P(6), nullptr), CUDA_SUCCESS);
  std::thread([] {
    void* v = nullptr;
    EXPECT_EQ(get()(&v, nullptr, P(0x10)), CUDA_ERROR_INVALID_CONTEXT);
    contexts::push(C(0xc7));
    EXPECT_EQ(get()(&v, nullptr, P(0x10)), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(get()(&v, C(0xc6), P(0x10)), CUDA_SUCCESS);
    EXPECT_EQ(v, P(6));
  }).join();
  on_context_destroyed(C(0xc6));
}

TEST_F(ContextLocalStorage, DeleteRemovesWithoutDestructorAndAbsentDeleteIsInvalidHandle) {
  contexts::push(C(0xc8));
  ASSERT_EQ(put()(nullptr, P(0x10), P(8), record_dtor), CUDA_SUCCESS);
  ASSERT_EQ(del()(nullptr, P(0x10)), CUDA_SUCCESS);
  EXPECT_TRUE(g_dtor_calls.empty());
  EXPECT_EQ(del()(nullptr, P(0x10)), CUDA_ERROR_INVALID_HANDLE);
  on_context_destroyed(C(0xc8));
  EXPECT_TRUE(g_dtor_calls.empty()) << "a deleted entry owes no destructor";
}

TEST_F(ContextLocalStorage, DestroyingAContextRunsItsDestructorsOnceWithContextKeyValue) {
  ASSERT_EQ(put()(C(0xc9), P(0x10), P(0x91), record_dtor), CUDA_SUCCESS);
  ASSERT_EQ(put()(C(0xc9), P(0x20), P(0x92), nullptr), CUDA_SUCCESS);  // no destructor: nothing to call
  ASSERT_EQ(put()(C(0xca), P(0x10), P(0xa1), record_dtor), CUDA_SUCCESS);
  on_context_destroyed(C(0xc9));
  ASSERT_EQ(g_dtor_calls.size(), 1u);
  EXPECT_EQ(g_dtor_calls[0].ctx, C(0xc9));
  EXPECT_EQ(g_dtor_calls[0].key, P(0x10));
  EXPECT_EQ(g_dtor_calls[0].value, P(0x91));
  void* v = nullptr;
  EXPECT_EQ(get()(&v, C(0xc9), P(0x10)), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(get()(&v, C(0xc9), P(0x20)), CUDA_ERROR_INVALID_HANDLE);
  ASSERT_EQ(get()(&v, C(0xca), P(0x10)), CUDA_SUCCESS);
  EXPECT_EQ(v, P(0xa1));
  on_context_destroyed(C(0xc9));
  EXPECT_EQ(g_dtor_calls.size(), 1u) << "destructors run once";
  on_context_destroyed(C(0xca));
  EXPECT_EQ(g_dtor_calls.size(), 2u);
}

void reentrant_dtor(CUcontext ctx, void* key, void*) {
  // Libraries free their state from the destructor and may touch the store again.
  void* v = nullptr;
  EXPECT_EQ(get()(&v, ctx, key), CUDA_ERROR_INVALID_HANDLE);
  EXPECT_EQ(put()(C(0xcc), key, P(1), nullptr), CUDA_SUCCESS);
  g_dtor_calls.push_back({ctx, key, nullptr});
}

TEST_F(ContextLocalStorage, DestructorsMayCallBackIntoTheStore) {
  ASSERT_EQ(put()(C(0xcb), P(0x10), P(0xb1), reentrant_dtor), CUDA_SUCCESS);
  on_context_destroyed(C(0xcb));
  EXPECT_EQ(g_dtor_calls.size(), 1u);
  on_context_destroyed(C(0xcc));
}

}  // namespace
}  // namespace rgpu::client::dark
