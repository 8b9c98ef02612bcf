// CUBLASLT_1734DC26 slots 4 and 13: the device's GPC of each TPC, which cuBLASLt 13 asks for the
// first time it lays out a kernel with thread-block clusters (every bf16 matmul of an AMP
// training step is one) and uses to count the TPCs per GPC ("gpcs", its GPC "skyline").
//
// What is known, read from libcublasLt.so.13.0's call site (no public notes describe the slots):
// - 4 `(void **data, u64 *token)`, no context argument: on success *data points at one byte per
//   TPC, the GPC index; cuBLASLt reads multiprocessor count / 2 of them (66 on an H200) and
//   counts TPCs per GPC. A failure, or *data NULL, makes it lay clusters out without the
//   topology (it still works, so while this slot was a stub training ran; the stub's
//   CUDA_ERROR_NOT_SUPPORTED is what a user saw in the log).
// - 13 `(void *data, u64 token)`: called with what slot 4 handed out once cuBLASLt has read it;
//   it releases the data (libnvrtc also frees with slot 13, so this table may be the driver's
//   general one for data it hands out).
// The driver's bytes describe one chip (which GPCs keep how many TPCs varies per chip), so the
// server's driver answers (protocol/messages.h kOpClusterTopology), once per device; each call
// of slot 4 gets its own copy of the shim's, and slot 13 frees it. The token is the shim's own
// (the byte count): cuBLASLt only hands it back. Unverified on the real driver until
// tests/gpu/run.sh's step cluster_topology has run: the token's meaning, and what the real
// slot answers without a current context (here CUDA_ERROR_INVALID_CONTEXT, as most slots do).
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <set>
#include <vector>

#include "client/call.h"
#include "client/contexts.h"
#include "client/dark_api/dark_api.h"
#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/dark_api.h"

namespace rgpu::client::dark {
namespace {

std::mutex g_mu;
auto& g_by_device = *new std::map<CUdevice, std::vector<uint8_t>>();  // the server's answers
auto& g_handed_out = *new std::set<void*>();                          // copies slot 13 may free
std::atomic<uint64_t> g_server_queries{0};

// The server's bytes for ctx (its device's), or an error; cached per device on success.
CUresult bytes_for(CUcontext ctx, std::vector<uint8_t>* out) {
  CUdevice dev = 0;
  if (CUresult rc = cuCtxGetDevice_v2(&dev, ctx)) return rc;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_by_device.find(dev); it != g_by_device.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  Call c(proto::kOpClusterTopology, kWaits);
  proto::wire::put_context_ask(c.args(), handle_id(ctx));
  CUresult rc = c.invoke();
  g_server_queries.fetch_add(1, std::memory_order_relaxed);
  if (rc != CUDA_SUCCESS) return rc;  // the slot's own error (or the connection's): not cached
  std::vector<uint8_t> bytes;
  if (!proto::wire::read_cluster_topology(c.reply(), &bytes)) {
    log::error("export table CUBLASLT_1734DC26 slot 4: the server's answer was malformed; returning CUDA_ERROR_UNKNOWN");
    return CUDA_ERROR_UNKNOWN;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  *out = g_by_device.try_emplace(dev, std::move(bytes)).first->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cluster_topology(void** data, uint64_t* token) {
  trace_call("dark:CUBLASLT_1734DC26[4]");
  if (!data || !token) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = contexts::current();
  if (!ctx) return CUDA_ERROR_INVALID_CONTEXT;
  std::vector<uint8_t> bytes;
  if (CUresult rc = bytes_for(ctx, &bytes)) return rc;
  *token = bytes.size();
  if (bytes.empty()) {
    *data = nullptr;  // the driver handed out nothing: neither does the shim
    return CUDA_SUCCESS;
  }
  void* copy = std::malloc(bytes.size());
  if (!copy) return CUDA_ERROR_OUT_OF_MEMORY;
  std::memcpy(copy, bytes.data(), bytes.size());
  std::lock_guard<std::mutex> lock(g_mu);
  g_handed_out.insert(copy);
  *data = copy;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cluster_topology_free(void* data, uint64_t) {
  trace_call("dark:CUBLASLT_1734DC26[13]");
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (!g_handed_out.erase(data)) return CUDA_ERROR_INVALID_VALUE;
  }
  std::free(data);
  return CUDA_SUCCESS;
}

}  // namespace

uint64_t cluster_topology_server_queries() { return g_server_queries.load(std::memory_order_relaxed); }

const void* cublaslt_1734_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kCublasLt1734, 17>(true);
    t[4] = slot_fn(&cluster_topology);
    t[13] = slot_fn(&cluster_topology_free);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
