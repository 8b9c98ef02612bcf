// CONTEXT_CHECKS: cudart asks, for a context, about flags that were never seen set (slot 2,
// 33 calls in a torch run) and calls slot 3 once at start-up; the real driver answered 0 to both.
#include <cuda.h>

#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark {
namespace {

CUresult CUDAAPI context_check(CUcontext, unsigned* flags, void**) {
  if (flags) *flags = 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI check_3() { return CUDA_SUCCESS; }

}  // namespace

const void* context_checks_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kContextChecks, 15>(true);
    t[2] = slot_fn(&context_check);
    t[3] = slot_fn(&check_3);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
