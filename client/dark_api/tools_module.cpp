// TOOLS_MODULE (the driver's CU_ETID_ToolsModule, 99 words): cuFFT calls slot 7 on a module it
// loaded with cuModuleLoadData to find its kernels, then reads their attributes and launches them.
//
// Slot 7 is `uint64_t (CUcontext ctx, CUmodule module, visitor, void *user)`, with
// `visitor(void *user, CUfunction f, const char *name)`: the driver calls the visitor once per
// function of the module, with the same CUfunction cuModuleGetFunction gives for that name and
// the name, ignores what the visitor returns, and returns how many functions it visited: a
// count, not a CUresult. Probed on driver 580.159.04: cuFFT (cufftPlan1d) passed
// (ctx, module, visitor in libcufft, its own stack pointer, ...) and got back 1 after one visit;
// a module of three kernels gave three visits (in source order) and 3, whether the visitor
// returned 0 or 1; the objects launched as CUfunctions. cuFFT through rgpu then planned and ran.
//
// Here the server walks its module with the driver's own slot (protocol/messages.h
// kOpModuleFunctions) and hands back the names; the client names each with its own
// cuModuleGetFunction (the same object on the driver, probed) and the visitor runs in this process
// with those client CUfunction handles, which launch with the layouts parsed from the module's
// image (client/modules.h). A module's functions never change, so each module is asked once; the
// names passed to visitors stay valid for the life of the process. A failure visits nothing,
// returns 0 (no function) and logs why; it is not cached, so the next call asks again.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "client/call.h"
#include "client/contexts.h"
#include "client/dark_api/dark_api.h"
#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/dark_api.h"

namespace rgpu::client::dark {
namespace {

using FunctionVisitor = int (*)(void* user, CUfunction f, const char* name);

struct Function {
  CUfunction handle;
  std::string name;
};
using Functions = std::vector<Function>;

std::mutex g_mu;
// By module id; never erased (module ids are never reused), so names stay valid.
auto& g_walked = *new std::unordered_map<uint64_t, std::shared_ptr<const Functions>>();
std::atomic<uint64_t> g_server_queries{0};

// The module's functions as the server's driver lists them, each named with the shim's
// cuModuleGetFunction (a fresh handle with the layout from the module's image, one-way when the
// image has the kernel), or nullptr after logging why.
std::shared_ptr<const Functions> ask_server(CUcontext ctx, CUmodule module) {
  Call c(proto::kOpModuleFunctions, kWaits);
  proto::wire::put_module_functions_ask(c.args(), {handle_id(ctx), handle_id(module)});
  CUresult rc = c.invoke();
  g_server_queries.fetch_add(1, std::memory_order_relaxed);
  if (rc != CUDA_SUCCESS) {
    log::warn("export table TOOLS_MODULE slot 7: the server could not list the functions of module %p (CUresult %d); "
              "visiting none",
              static_cast<void*>(module), static_cast<int>(rc));
    return nullptr;
  }
  std::vector<std::string> names;
  if (!proto::wire::read_function_names(c.reply(), &names)) {
    log::error("export table TOOLS_MODULE slot 7: the server's list of functions was malformed; visiting none");
    return nullptr;
  }
  auto out = std::make_shared<Functions>();
  for (std::string& name : names) {
    CUfunction f = nullptr;
    rc = cuModuleGetFunction(&f, module, name.c_str());
    if (rc != CUDA_SUCCESS) {
      log::warn("export table TOOLS_MODULE slot 7: cuModuleGetFunction(%s) failed (CUresult %d) for a function the "
                "driver listed; visiting none",
                name.c_str(), static_cast<int>(rc));
      return nullptr;
    }
    out->push_back({f, std::move(name)});
  }
  return out;
}

uint64_t CUDAAPI module_functions(CUcontext ctx, CUmodule module, FunctionVisitor visit, void* user) {
  if (!module || !visit) {
    log::warn("export table TOOLS_MODULE slot 7 was called without a module or a visitor; visiting none");
    return 0;
  }
  if (!ctx) ctx = contexts::current();
  std::shared_ptr<const Functions> functions;
  {
    std::lock_guard<std::mutex> lock(g_mu);
    if (auto it = g_walked.find(handle_id(module)); it != g_walked.end()) functions = it->second;
  }
  if (!functions) {
    functions = ask_server(ctx, module);
    if (!functions) return 0;
    std::lock_guard<std::mutex> lock(g_mu);
    functions = g_walked.try_emplace(handle_id(module), functions).first->second;
  }
  for (const Function& f : *functions) visit(user, f.handle, f.name.c_str());  // its result: ignored, as the driver does
  return functions->size();
}

}  // namespace

uint64_t tools_module_server_queries() { return g_server_queries.load(std::memory_order_relaxed); }

const void* tools_module_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kToolsModule, 99>(true);
    t[7] = slot_fn(&module_functions);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
