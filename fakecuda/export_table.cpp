// cuGetExportTable: the three private tables whose slots rgpu-server asks the driver for on the
// client's behalf (server/handlers/dark_api.cpp), shaped as driver 580 serves them (sizes and
// signatures in client/dark_api/README.md). Every other UUID is refused with
// CUDA_ERROR_INVALID_VALUE, as the real driver refuses one it does not know; every other slot
// answers CUDA_ERROR_NOT_SUPPORTED.
//
// TOOLS_CONTEXT 51 `(ctx, CUstream, void **obj)` gives each (live context, stream) one object
// (NULL and CU_STREAM_LEGACY are the same stream), 39 `(ctx, obj, u64 *out)` writes 7 × the
// object's number (driver 580 wrote 7 × the context's id for the NULL stream, other values for
// other streams).
// TOOLS_MODULE 7 `(ctx, module, cb, user)` calls cb(user, function, name) for each function of the
// module in image order and returns how many it called (a count, not a CUresult).
// CUBLASLT_1734DC26 4 `(void **data, u64 *token)` hands out the current context's device's GPC
// of each TPC, one byte each (client/dark_api/cluster_topology.cpp says how that was read out of
// cuBLASLt); 13 `(data, token)` takes it back. An H200 has 66 TPCs (132 SMs) in 8 GPCs; which
// GPC has how many differs from chip to chip (floorsweeping), so the fake's split (9, 9, then
// 8 each) is a plausible one, not a measured one.
#include <array>
#include <iterator>
#include <memory>
#include <map>
#include <cstring>

#include "fakecuda/internal.h"

using namespace fake;

namespace {

CUresult not_supported() { return CUDA_ERROR_NOT_SUPPORTED; }

template <size_t N>
std::array<const void*, N> table_of_stubs() {
  std::array<const void*, N> t;
  t.fill(reinterpret_cast<const void*>(&not_supported));
  t[0] = reinterpret_cast<const void*>(N * sizeof(void*));
  return t;
}

// Slot 51's object of each (context, stream) (g_mu guards it), shaped like the real one's first words.
std::map<std::pair<CUctx_st*, CUstream>, std::unique_ptr<uint64_t[]>>& objects() {
  static auto* m = new std::map<std::pair<CUctx_st*, CUstream>, std::unique_ptr<uint64_t[]>>();
  return *m;
}

uint64_t g_objects_made = 0;  // g_mu

CUresult context_object(CUcontext ctx, CUstream stream, void** obj) {
  if (!obj) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  if (!ctx || !ctx_alive_locked(ctx)) return CUDA_ERROR_INVALID_HANDLE;  // NULL too, as driver 580
  if (stream == CU_STREAM_LEGACY) stream = nullptr;
  auto& o = objects()[{ctx, stream}];
  // {1, 0, ctx, 0, 0, 1, 0, 0, value}: the real object's first words, then what 39 answers.
  if (!o) o.reset(new uint64_t[9]{1, 0, reinterpret_cast<uint64_t>(ctx), 0, 0, 1, 0, 0, 7 * ++g_objects_made});
  *obj = o.get();
  return CUDA_SUCCESS;
}

// Answers by the object alone, whatever the context argument, as driver 580 does.
CUresult context_object_query(CUcontext, void* obj, uint64_t* out) {
  if (!obj || !out) return CUDA_ERROR_INVALID_VALUE;
  if (CUresult r = check_init()) return r;
  std::lock_guard lk(g_mu);
  for (auto& [key, o] : objects()) {
    if (o.get() == obj && ctx_alive_locked(key.first)) {
      *out = o[8];
      return CUDA_SUCCESS;
    }
  }
  return CUDA_ERROR_INVALID_HANDLE;
}

using FunctionVisitor = int (*)(void* user, CUfunction f, const char* name);

uint64_t module_functions(CUcontext, CUmodule mod, FunctionVisitor visit, void* user) {
  if (!visit || check_init() != CUDA_SUCCESS) return 0;
  std::vector<std::pair<CUfunction, const char*>> found;
  {
    std::lock_guard lk(g_mu);
    auto it = g_modules.find(mod);
    if (it == g_modules.end()) return 0;
    for (auto& f : it->second->funcs) found.emplace_back(f.get(), f->kernel->name.c_str());
  }
  for (auto& [f, name] : found) visit(user, f, name);  // outside the lock: the visitor may call in
  return found.size();
}

constexpr int kTpcsPerGpc[] = {9, 9, 8, 8, 8, 8, 8, 8};  // 66 TPCs: the H200's 132 SMs, 2 per TPC

// The handed-out blocks (g_mu guards it), so that slot 13 refuses what slot 4 did not hand out.
std::map<void*, std::unique_ptr<uint8_t[]>>& topologies() {
  static auto* m = new std::map<void*, std::unique_ptr<uint8_t[]>>();
  return *m;
}

CUresult cluster_topology(void** data, uint64_t* token) {
  if (!data || !token) return CUDA_ERROR_INVALID_VALUE;
  CUctx_st* c;
  if (CUresult r = current_ctx(&c)) return r;
  std::unique_ptr<uint8_t[]> bytes(new uint8_t[66]);
  size_t n = 0;
  for (int gpc = 0; gpc < int(std::size(kTpcsPerGpc)); ++gpc)
    for (int i = 0; i < kTpcsPerGpc[gpc]; ++i) bytes[n++] = static_cast<uint8_t>(gpc);
  std::lock_guard lk(g_mu);
  *data = bytes.get();
  *token = n;
  topologies().emplace(bytes.get(), std::move(bytes));
  return CUDA_SUCCESS;
}

CUresult cluster_topology_free(void* data, uint64_t) {
  std::lock_guard lk(g_mu);
  return topologies().erase(data) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

const CUuuid kToolsContext = {{0x21, 0x31, char(0x8c), 0x60, char(0x97), 0x14, 0x32, 0x48, char(0x8c), char(0xa6),
                               0x41, char(0xff), 0x73, 0x24, char(0xc8), char(0xf2)}};
const CUuuid kToolsModule = {{0x6e, 0x16, 0x3f, char(0xbe), char(0xb9), 0x58, 0x44, 0x4d, char(0x83), 0x5c,
                              char(0xe1), char(0x82), char(0xaf), char(0xf1), char(0x99), 0x1e}};

const CUuuid kCublasLt1734 = {{0x17, 0x34, char(0xdc), 0x26, char(0x80), 0x0d, 0x47, 0x45, char(0x87), 0x26,
                               char(0xc0), char(0xf1), char(0xe7), char(0xdd), char(0x8b), char(0xca)}};

}  // namespace

FAKE_API CUresult CUDAAPI cuGetExportTable(const void** table, const CUuuid* id) {
  if (!table || !id) return CUDA_ERROR_INVALID_VALUE;
  static const auto tools_context = [] {
    auto t = table_of_stubs<93>();
    t[39] = reinterpret_cast<const void*>(&context_object_query);
    t[51] = reinterpret_cast<const void*>(&context_object);
    return t;
  }();
  static const auto tools_module = [] {
    auto t = table_of_stubs<99>();
    t[7] = reinterpret_cast<const void*>(&module_functions);
    return t;
  }();
  static const auto cublaslt = [] {
    auto t = table_of_stubs<17>();
    t[4] = reinterpret_cast<const void*>(&cluster_topology);
    t[13] = reinterpret_cast<const void*>(&cluster_topology_free);
    return t;
  }();
  if (!std::memcmp(id, &kToolsContext, sizeof *id)) *table = tools_context.data();
  else if (!std::memcmp(id, &kToolsModule, sizeof *id)) *table = tools_module.data();
  else if (!std::memcmp(id, &kCublasLt1734, sizeof *id)) *table = cublaslt.data();
  else return CUDA_ERROR_INVALID_VALUE;
  return CUDA_SUCCESS;
}
