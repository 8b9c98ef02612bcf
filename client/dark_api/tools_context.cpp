// TOOLS_CONTEXT (the driver's CU_ETID_ToolsContext, 93 words): cuBLASLt calls slot 4 on every
// matmul path, cuSOLVER calls 39 and 51.
//
// Slot 4 is (CUcontext, uint64_t *out) and writes the context's number, the value cuCtxGetId
// reports (probed on driver 580: 1 for the primary context of a fresh process; a NULL context gets
// 0 and success; public tooling names the slot "getContextNumber"). The shim numbers contexts
// itself, from 1 in the order it first sees them: unique per process, as callers that key caches
// by it need, and answered without a round trip.
// Slot 3 is (CUcontext, CUdevice *out): the context's device (probed: 0 for device 0's primary).
//
// Slots 51 and 39 (cuBLAS, cuBLASLt, cuSOLVER: right before kernel launches):
// 51 `(CUcontext, CUstream, void **object)` returns a driver-private object for the stream in
// that context, 39 `(CUcontext, object, u64 *out)` writes 8 bytes about it (on driver 580: 7
// times the context's id for the NULL stream). The second argument is the stream the library
// is about to launch on (cuSOLVER passes NULL; cuBLAS its handle's stream: through the shim a
// client stream id such as 0x1017, which the shim once mistook for a selector and answered as
// NULL's, and cuBLAS then computed wrong sgemm results; its context comes from TOOLS_TLS slot 2,
// tools.cpp). The server's driver answers both
// (protocol/messages.h kOpToolsContextObject) with the stream translated; the driver's object
// stays on the server, and the caller gets a zeroed block of the shim's own that stands for it.
// Answers are cached per (context, stream), so each costs one round trip however often it is
// asked. Why that is sound: README.md, "TOOLS_CONTEXT 51 and 39".
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <cstring>
#include <mutex>
#include <map>
#include <unordered_map>
#include <utility>


#include "client/call.h"
#include "client/contexts.h"
#include "client/dark_api/dark_api.h"
#include "common/env.h"
#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/dark_api.h"

namespace rgpu::client::dark {
namespace {

std::mutex g_mu;
std::unordered_map<CUcontext, uint64_t>* g_numbers = new std::unordered_map<CUcontext, uint64_t>();
uint64_t g_next = 1;

CUresult CUDAAPI context_device(CUcontext ctx, CUdevice* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  return cuCtxGetDevice_v2(out, ctx);
}

CUresult CUDAAPI context_number(CUcontext ctx, uint64_t* out) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) {
    *out = 0;
    return CUDA_SUCCESS;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto [it, fresh] = g_numbers->try_emplace(ctx, g_next);
  if (fresh) ++g_next;
  *out = it->second;
  return CUDA_SUCCESS;
}

// What slot 51 handed out for a context, and what slot 39 answers for it.
struct ContextObject {
  // The block the caller holds as "the object": zeroed, never read by the shim, never freed (a
  // caller may keep the pointer past the context's end; 39 then refuses it by the side table).
  alignas(16) uint64_t block[8] = {};
  CUcontext ctx = nullptr;
  CUstream stream = nullptr;
  CUresult query_result = CUDA_SUCCESS;
  uint64_t value = 0;
};
// By (context, stream) and by block address; g_mu guards both. An entry lives as long as its
// context: tools_context_destroyed (on_context_destroyed) drops it on cuCtxDestroy and primary
// reset. (A destroyed stream's entry stays until then: client stream ids are never reused.)
auto& g_objects = *new std::map<std::pair<CUcontext, CUstream>, ContextObject*>();
auto& g_by_block = *new std::unordered_map<const void*, ContextObject*>();
std::atomic<uint64_t> g_server_queries{0};

// How many bytes slot 39 writes (driver 580, probed with a buffer prefilled with 0xAA).
constexpr size_t kQueryBytes = 8;

// Drops a context's entry (g_mu held). The block stays allocated: callers may still hold it.
void drop_locked(ContextObject* entry) {
  g_by_block.erase(entry->block);
  g_objects.erase({entry->ctx, entry->stream});
}

CUresult CUDAAPI context_object(CUcontext ctx, CUstream stream, void** object) {
  if (!object) return CUDA_ERROR_INVALID_VALUE;
  if (!ctx) return CUDA_ERROR_INVALID_HANDLE;  // driver 580: NULL is not "the current context" here
  if (stream == CU_STREAM_LEGACY) stream = nullptr;  // the same stream (driver 580: the same object)
  // The second argument is the stream the caller launches on next (README.md "TOOLS_CONTEXT 51
  // and 39"); RGPU_TOOLS_STREAM=0 answers every stream as the NULL stream, for comparison.
  if (!env::get().tools_stream) stream = nullptr;
  const auto key = std::make_pair(ctx, stream);
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_objects.find(key); it != g_objects.end()) {
      *object = it->second->block;
      return CUDA_SUCCESS;
    }
  }
  // First time for this context and stream: the server's driver answers.
  Call c(proto::kOpToolsContextObject, kWaits);
  proto::wire::put_tools_context_ask(c.args(), {handle_id(ctx), handle_id(stream)});
  CUresult rc = c.invoke();
  g_server_queries.fetch_add(1, std::memory_order_relaxed);
  if (rc == CUDA_ERROR_INVALID_HANDLE)
    log::warn("export table TOOLS_CONTEXT slot 51: the server knows no context %p or stream %p; returning "
              "CUDA_ERROR_INVALID_HANDLE",
              static_cast<void*>(ctx), static_cast<void*>(stream));
  if (rc != CUDA_SUCCESS) return rc;  // slot 51's own error (or the connection's): not cached
  auto* entry = new ContextObject();
  entry->ctx = ctx;
  entry->stream = stream;
  proto::wire::ToolsContextValue answer;
  const bool decoded = proto::wire::read_tools_context_value(c.reply(), &answer);
  entry->query_result = static_cast<CUresult>(answer.query_result);
  entry->value = answer.value;
  if (!decoded) {
    delete entry;
    log::error("export table TOOLS_CONTEXT slot 51: the server's answer was malformed; returning CUDA_ERROR_UNKNOWN");
    return CUDA_ERROR_UNKNOWN;
  }
  std::lock_guard<std::mutex> lock(g_mu);
  auto [it, fresh] = g_objects.try_emplace(key, entry);  // another thread may have asked meanwhile
  if (fresh) g_by_block[entry->block] = entry;
  else delete entry;
  *object = it->second->block;
  return CUDA_SUCCESS;
}

// The context argument is not consulted: driver 580 answers by the object alone (NULL and another
// context's handle got the object's own value).
CUresult CUDAAPI context_object_query(CUcontext, void* object, void* out) {
  if (!object || !out) return CUDA_ERROR_INVALID_VALUE;
  CUresult result;
  uint64_t value;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    auto it = g_by_block.find(object);
    if (it == g_by_block.end()) {
      log::warn("export table TOOLS_CONTEXT slot 39 was given %p, which slot 51 did not return for a live context; "
                "returning CUDA_ERROR_INVALID_HANDLE",
                object);
      return CUDA_ERROR_INVALID_HANDLE;
    }
    result = it->second->query_result;
    value = it->second->value;
  }
  if (result == CUDA_SUCCESS) std::memcpy(out, &value, kQueryBytes);
  return result;
}

}  // namespace

uint64_t tools_context_server_queries() { return g_server_queries.load(std::memory_order_relaxed); }

// A destroyed context's handle may come back for a new context, and a reset primary context keeps
// its handle: either way the context behind it is new and gets a new number and a new object
// (driver 580 gave the reset primary context id 4 and a new object valued 28, after 1 and 7).
void tools_context_destroyed(CUcontext ctx) {
  std::lock_guard<std::mutex> lock(g_mu);
  g_numbers->erase(ctx);
  for (auto it = g_objects.lower_bound({ctx, nullptr}); it != g_objects.end() && it->first.first == ctx;)
    drop_locked((it++)->second);
}

const void* tools_context_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kToolsContext, 93>(true);
    t[3] = slot_fn(&context_device);
    t[4] = slot_fn(&context_number);
    t[39] = slot_fn(&context_object_query);
    t[51] = slot_fn(&context_object);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
