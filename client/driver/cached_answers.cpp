// Kernel and function attributes, context limits and occupancy, answered from the client after
// the first time (client/driver/cached_answers.h). The PyTorch profile asks cuKernelGetAttribute
// 144 times, cuCtxGetLimit 24 and the occupancy calculator 5 times per training step, always the
// same questions; each was a round trip.
//
// Also cuOccupancyMaxActiveClusters (99 calls in the GPU ladder), cuCtxGetApiVersion and
// cuModuleGetLoadingMode.
//
// What invalidates what:
// - cuKernelSetAttribute, cuKernelSetCacheConfig: the answers for that kernel and for every
//   function cuKernelGetFunction gave for it (they share their attributes: forgetting only the
//   kernel's own left its functions' stale, and cuBLAS, which raises a kernel's dynamic shared
//   memory and reads it back through the function, failed with CUBLAS_STATUS_INTERNAL_ERROR on
//   the H200); their occupancy answers. PyTorch sets the same attribute to the same value before
//   many launches (502 times in the GPU ladder): a repeat of the last value set is not sent and
//   forgets nothing.
// - cuFuncSetAttribute, cuFuncSetCacheConfig: every attribute and occupancy answer (a function
//   may be a kernel's, or a module's that shares a library's kernels). cuFuncSetAttribute is
//   one-way too, and a repeat of the last value set (with no other set between) is not sent.
// - cuCtxSetLimit: the limits of the current context. A context destroyed or a primary context
//   reset: everything.
// CU_LIMIT_STACK_SIZE is never cached: the driver raises it by itself when a kernel needs more.
// Answers about a kernel are also kept across runs (client/answer_store.h), keyed by what names
// the kernel across runs and the attributes the program had set on it (g_identity_sets): a run
// that sets the same attributes asks none of these questions again.
// A failed answer is not cached. cuKernelSetAttribute is one-way (codegen/annotations.txt): its
// error, if any, comes with the next call that waits, as for launches.
#include <cuda.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>

#include "client/answer_store.h"
#include "client/call.h"
#include "client/contexts.h"
#include "client/driver/cached_answers.h"
#include "client/modules.h"
#include "client/runtime.h"
#include "common/crypto.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/occupancy.h"

namespace {

using rgpu::client::Call;
using rgpu::client::handle_id;

std::mutex& mu() {
  static auto* m = new std::mutex;  // leaked: used from exit handlers
  return *m;
}
// (kernel or function id, attribute, device; -1 for functions) → value
auto& g_attrs = *new std::map<std::tuple<uint64_t, int, int>, int>();
// (context, limit) → value
auto& g_limits = *new std::map<std::pair<CUcontext, int>, size_t>();
// Contexts whose limits this process has set: their answers are not a fresh context's defaults.
auto& g_limits_set = *new std::set<CUcontext>();
// context → cuCtxGetStreamPriorityRange's (least, greatest)
auto& g_priorities = *new std::map<CUcontext, std::pair<int, int>>();
// context → cuCtxGetApiVersion's answer
auto& g_api_versions = *new std::map<CUcontext, unsigned int>();
// cuOccupancyAvailableDynamicSMemPerBlock: (function id, blocks, block size) → bytes
auto& g_dynamic_smem = *new std::map<std::tuple<uint64_t, int, int>, size_t>();
// (function id, block size, dynamic shared memory, flags) → blocks per SM
auto& g_occupancy = *new std::map<std::tuple<uint64_t, int, size_t, unsigned>, int>();
// cuOccupancyMaxActiveClusters: (function id, the launch configuration's bytes but the grid) →
// the driver's answer (errors too: a width the kernel refuses stays refused until an attribute
// set forgets it)
auto& g_clusters = *new std::map<std::pair<uint64_t, std::string>, std::pair<CUresult, int>>();
// cuKernelSetAttribute: (kernel id, attribute, device) → the last value set
auto& g_kernel_sets = *new std::map<std::tuple<uint64_t, int, int>, int>();
// cuFuncSetAttribute: (function id, attribute) → the last value set, while nothing else was set
auto& g_func_sets = *new std::map<std::pair<uint64_t, int>, int>();

// Bumped (under mu()) by every attribute or cache configuration set that is sent and by every
// forget: an answer noted with the generation it was got in holds for launch checks only while
// the generation is the same (launch_limits).
uint64_t g_generation = 0;
// (kernel or function id, device; -1 for functions) -> the generation fetch_all_attributes asked in
auto& g_attrs_generation = *new std::map<std::pair<uint64_t, int>, uint64_t>();
// g_occupancy's keys -> the generation each answer was got in
auto& g_occupancy_generation = *new std::map<std::tuple<uint64_t, int, size_t, unsigned>, uint64_t>();
// The last CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES set on a function or kernel id: the
// limit, or above it when the driver refused the set (the limit then stays what it was, which
// was below). Never dropped, so that presence also says "was set".
struct DynamicSharedSet {
  long long value;
  uint64_t generation;
  int dev;  // -1 for a function
};
auto& g_dynamic_shared_sets = *new std::map<uint64_t, DynamicSharedSet>();
// Ids whose attributes launch_limits asked once already.
auto& g_limits_asked = *new std::set<uint64_t>();

// Kernel identity (ModuleRegistry::identity) -> the attributes set on it in this process, as
// "what=value" entries; part of every key kept across runs.
auto& g_identity_sets = *new std::map<std::string, std::map<std::string, long long>>();

void note_set(uint64_t id, const std::string& what, long long value) {
  std::string identity = rgpu::client::ModuleRegistry::get().identity(id);
  if (identity.empty()) return;
  std::lock_guard lk(mu());
  g_identity_sets[identity][what] = value;
}

// "@<server ordinal>" of the current context's device: where a function's attribute set applies.
std::string current_device_tag() {
  CUdevice d = -1;
  if (!rgpu::client::contexts::device_of(rgpu::client::contexts::current(), &d)) return "@?";
  return "@" + std::to_string(rgpu::client::server_device(d));
}

// The start of the key of a question about kernel/function `id` asked for client device `dev`
// (-1: the current context's) that holds across runs: GPU, driver, kernel, attributes set. ""
// when the answer cannot be kept (unknown kernel or device, or the store is off).
std::string lasting_key(const char* question, uint64_t id, int dev) {
  std::string identity = rgpu::client::ModuleRegistry::get().identity(id);
  if (identity.empty() || !rgpu::client::answer_store::enabled()) return "";
  std::string device = rgpu::client::answer_store::device_tag(dev);
  if (device.empty()) return "";
  std::string key = std::string(question) + "|" + device + "|" + identity + "|";
  std::lock_guard lk(mu());
  if (auto it = g_identity_sets.find(identity); it != g_identity_sets.end())
    for (const auto& [what, value] : it->second) key += what + "=" + std::to_string(value) + ",";
  return key + "|";
}

// A whole-number answer from the answer store under `key` when it holds it, else asked and kept
// there ("" key: asked, not kept).
template <class T, class Ask>
CUresult lasting_number(const std::string& key, T* out, Ask ask) {
  std::string stored;
  if (!key.empty() && rgpu::client::answer_store::lookup(key, &stored)) {
    char* end = nullptr;
    long long v = std::strtoll(stored.c_str(), &end, 10);
    if (!stored.empty() && *end == 0 && v >= static_cast<long long>(std::numeric_limits<T>::min()) &&
        static_cast<unsigned long long>(v) <= static_cast<unsigned long long>(std::numeric_limits<T>::max())) {
      *out = static_cast<T>(v);
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = ask(out);
  if (rc == CUDA_SUCCESS && !key.empty()) rgpu::client::answer_store::store(key, std::to_string(*out));
  return rc;
}

// The key of a question about function `func` (question, then its arguments) kept across runs.
std::string function_key(const char* question, CUfunction func, const std::string& args) {
  std::string key = lasting_key(question, handle_id(func), -1);
  return key.empty() ? key : key + args;
}

// The key of a question about client device `dev` (-1: the current context's) that holds across
// runs (a fresh context's defaults), or "".
std::string device_key(const char* question, const std::string& args, CUdevice dev = -1) {
  if (!rgpu::client::answer_store::enabled()) return "";
  std::string device = rgpu::client::answer_store::device_tag(dev);
  return device.empty() ? device : std::string(question) + "|" + device + "|" + args;
}

// The stored form of a list of int answers (answer_store::parse_pairs).
bool parse_pairs(const std::string& text, char sep, std::vector<std::pair<long long, long long>>* out) {
  return rgpu::client::answer_store::parse_pairs(text, sep, INT32_MIN, INT32_MAX, out);
}

// Drops the cached attributes and occupancy answers of these kernel/function ids (mu() held).
// Only theirs: PyTorch sets an attribute on 26 kernels at start-up, and forgetting every answer
// each time made it ask cuOccupancyMaxActiveClusters 82 times at 30 ms on the H200.
void forget_attrs_of_locked(const std::vector<uint64_t>& ids) {
  ++g_generation;
  g_func_sets.clear();  // a kernel's set may have changed what a function's repeat would set
  for (uint64_t id : ids) {
    for (auto it = g_attrs.lower_bound({id, INT32_MIN, INT32_MIN}); it != g_attrs.end() && std::get<0>(it->first) == id;)
      it = g_attrs.erase(it);
    for (auto it = g_occupancy.lower_bound({id, INT32_MIN, 0, 0}); it != g_occupancy.end() && std::get<0>(it->first) == id;)
      it = g_occupancy.erase(it);
    for (auto it = g_dynamic_smem.lower_bound({id, INT32_MIN, INT32_MIN}); it != g_dynamic_smem.end() && std::get<0>(it->first) == id;)
      it = g_dynamic_smem.erase(it);
    for (auto it = g_clusters.lower_bound({id, std::string()}); it != g_clusters.end() && it->first.first == id;)
      it = g_clusters.erase(it);
  }
}

// Every attribute of a kernel (dev >= 0) or function (dev -1) from the server in one round trip
// (kOpFuncAttributes), into g_attrs. Attributes the driver refused are left out: asking for one
// of them alone gets its error.
void fetch_all_attributes(uint64_t id, int dev) {
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return;
  const std::string key = lasting_key("attrs", id, dev);
  std::string stored;
  std::vector<std::pair<long long, long long>> kept;  // "attribute=value," per answered attribute
  if (!key.empty() && rgpu::client::answer_store::lookup(key, &stored) && parse_pairs(stored, '=', &kept)) {
    std::lock_guard lk(mu());
    for (const auto& [a, v] : kept) g_attrs.try_emplace({id, static_cast<int>(a), dev}, static_cast<int>(v));
    g_attrs_generation[{id, dev}] = g_generation;  // kept under the sets made so far: they hold now
    return;
  }
  uint64_t generation;
  {
    std::lock_guard lk(mu());
    generation = g_generation;  // the reply reflects every set sent before it
  }
  Call c(rgpu::proto::kOpFuncAttributes, rgpu::client::kWaits);
  rgpu::proto::wire::put_func_attributes_ask(
      c.args(), {id, static_cast<uint8_t>(dev >= 0 ? 1 : 0), dev >= 0 ? rgpu::client::server_device(dev) : 0});
  CUresult rc = c.invoke();
  if (rc == CUDA_ERROR_NOT_SUPPORTED) unsupported.store(true, std::memory_order_relaxed);
  if (rc != CUDA_SUCCESS) return;
  std::vector<rgpu::proto::wire::FuncAttribute> answers;
  if (!rgpu::proto::wire::read_func_attributes(c.reply(), &answers)) return;
  std::vector<std::tuple<int32_t, int32_t, int32_t>> got;
  for (const auto& a : answers) got.emplace_back(a.attribute, a.result, a.value);
  std::string keep;
  {
    std::lock_guard lk(mu());
    for (const auto& [attr, result, value] : got) {
      if (result != CUDA_SUCCESS) continue;
      g_attrs.try_emplace({id, attr, dev}, value);
      keep += std::to_string(attr) + "=" + std::to_string(value) + ",";
    }
    g_attrs_generation[{id, dev}] = generation;
  }
  if (!key.empty()) rgpu::client::answer_store::store(key, keep);
}

// A kernel and the functions it has handed out.
std::vector<uint64_t> kernel_and_functions(uint64_t kernel_id) {
  auto ids = rgpu::client::functions_of_kernel(kernel_id);
  ids.push_back(kernel_id);
  return ids;
}

void forget_attrs_and_occupancy() {
  std::lock_guard lk(mu());
  ++g_generation;
  g_attrs.clear();
  g_occupancy.clear();
  g_dynamic_smem.clear();
  g_clusters.clear();
  g_kernel_sets.clear();  // a function's set may have changed what a kernel's repeat would set
  g_func_sets.clear();
}

template <class Key, class Value, class Ask>
CUresult cached(std::map<Key, Value>& cache, const Key& key, Value* out, Ask ask) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  {
    std::lock_guard lk(mu());
    if (auto it = cache.find(key); it != cache.end()) {
      *out = it->second;
      return CUDA_SUCCESS;
    }
  }
  CUresult rc = ask(out);
  if (rc == CUDA_SUCCESS) {
    std::lock_guard lk(mu());
    cache[key] = *out;
  }
  return rc;
}

// An attribute from the cache; on a miss, all of them from the server, then this one alone.
template <class Ask>
CUresult attribute(uint64_t id, int attr, int dev, int* out, Ask ask) {
  if (!out) return CUDA_ERROR_INVALID_VALUE;
  const auto key = std::make_tuple(id, attr, dev);
  bool known;
  {
    std::lock_guard lk(mu());
    known = g_attrs.count(key) != 0;
  }
  if (!known) fetch_all_attributes(id, dev);
  return cached(g_attrs, key, out, ask);
}

// The cache key of a cluster query: every field of the configuration that travels (attributes by
// value) but the grid, which the answer does not depend on (clusters that fit on the GPU at once).
std::string cluster_key(const CUlaunchConfig& config) {
  CUlaunchConfig shape = config;
  shape.gridDimX = shape.gridDimY = shape.gridDimZ = 0;
  std::string bytes(reinterpret_cast<const char*>(&shape), offsetof(CUlaunchConfig, attrs));
  for (unsigned i = 0; i < config.numAttrs; ++i)
    bytes.append(reinterpret_cast<const char*>(&config.attrs[i]), sizeof(CUlaunchAttribute));
  return bytes;
}

// cuOccupancyMaxActiveClusters's request (protocol/wire/occupancy.h).
void put_cluster_query(rgpu::Writer& w, CUfunction func, const CUlaunchConfig& config) {
  const rgpu::proto::wire::LaunchDims dims{{config.gridDimX, config.gridDimY, config.gridDimZ},
                                          {config.blockDimX, config.blockDimY, config.blockDimZ},
                                          config.sharedMemBytes};
  rgpu::proto::wire::put_launch_ex_head(w, handle_id(func), dims, handle_id(config.hStream), config.attrs,
                                        config.numAttrs);
}

// A cluster shape of width x (y = z = 1) is asked with the next widths too, in one round trip
// (kOpClusterOccupancyTable): a PyTorch kernel probes widths one by one at start-up (82 round
// trips at 30 ms on the H200). When the grid is one cluster wide, so is each asked grid. False
// when the server cannot say; the caller asks for this configuration alone.
bool fetch_cluster_table(CUfunction func, const CUlaunchConfig& config, unsigned cluster_attr) {
  static std::atomic<bool> unsupported{false};
  if (unsupported.load(std::memory_order_relaxed)) return false;
  const auto& dim = config.attrs[cluster_attr].value.clusterDim;
  constexpr uint32_t kWidths = 32;
  const bool grid_follows = config.gridDimX == dim.x && config.gridDimY == 1 && config.gridDimZ == 1;
  // Kept across runs under the configuration less the stream (a handle of this process).
  CUlaunchConfig lasting_shape = config;
  lasting_shape.hStream = nullptr;
  const std::string shape = cluster_key(lasting_shape);
  std::string key = lasting_key("clusters", handle_id(func), -1);
  if (!key.empty()) key += rgpu::crypto::hex(shape.data(), shape.size()) + "|" + std::to_string(dim.x) + "|" + (grid_follows ? "1" : "0");
  std::vector<std::pair<CUresult, int>> got;
  std::string stored;
  std::vector<std::pair<long long, long long>> kept;  // "result:clusters," per width
  if (!key.empty() && rgpu::client::answer_store::lookup(key, &stored) && parse_pairs(stored, ':', &kept) &&
      kept.size() == kWidths) {
    for (const auto& [r, v] : kept) got.emplace_back(static_cast<CUresult>(r), static_cast<int>(v));
  } else {
    Call c(rgpu::proto::kOpClusterOccupancyTable, rgpu::client::kWaits);
    put_cluster_query(c.args(), func, config);
    rgpu::proto::wire::put_cluster_widths(c.args(), {dim.x, kWidths, grid_follows});
    CUresult rc = c.invoke();
    if (rc == CUDA_ERROR_NOT_SUPPORTED) unsupported.store(true, std::memory_order_relaxed);
    if (rc != CUDA_SUCCESS) return false;
    std::vector<std::pair<int32_t, int32_t>> table;
    if (!rgpu::proto::wire::read_cluster_table(c.reply(), &table) || table.size() != kWidths) return false;
    for (const auto& [result, clusters] : table) got.emplace_back(static_cast<CUresult>(result), clusters);
    if (!key.empty()) {
      std::string keep;
      for (const auto& [result, clusters] : got) keep += std::to_string(result) + ":" + std::to_string(clusters) + ",";
      rgpu::client::answer_store::store(key, keep);
    }
  }
  const uint32_t n = static_cast<uint32_t>(got.size());
  std::vector<CUlaunchAttribute> attrs(config.attrs, config.attrs + config.numAttrs);
  CUlaunchConfig asked = config;
  asked.attrs = attrs.data();
  std::lock_guard lk(mu());
  for (uint32_t i = 0; i < n; ++i) {
    attrs[cluster_attr].value.clusterDim.x = dim.x + i;
    g_clusters[{handle_id(func), cluster_key(asked)}] = got[i];
  }
  return true;
}

// cuFuncSetAttribute and cuKernelSetAttribute are one-way: what the driver refuses at once is
// refused here (client/driver/argument_checks.h), with nothing sent and nothing cached.
CUresult checked_set(uint16_t op, uint64_t id, CUdevice dev, CUfunction_attribute attrib, int value) {
  rgpu::client::checks::DeviceLimits limits;
  if (dev < 0 || !rgpu::client::checks::device_limits(dev, &limits)) limits = {};  // optin unknown: not checked
  CUresult rc = rgpu::client::checks::set_function_attribute(limits, attrib, value,
                                                             rgpu::client::cached_static_shared(id, dev));
  return rc == CUDA_SUCCESS ? rc : rgpu::client::checks::refused(op, rc);
}

}  // namespace

namespace rgpu::client {

int cached_static_shared(uint64_t id, int dev) {
  std::lock_guard lk(mu());
  for (int d : {dev, -1}) {
    if (auto it = g_attrs.find({id, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, d}); it != g_attrs.end()) return it->second;
  }
  return -1;
}

checks::FunctionLimits launch_limits(uint64_t id, CUdevice dev, unsigned threads, unsigned shared, bool cooperative,
                                     unsigned default_shared, int multiprocessors) {
  checks::FunctionLimits out;
  {
    std::lock_guard lk(mu());
    for (int d : {-1, static_cast<int>(dev)})  // fixed when the code was compiled
      if (auto it = g_attrs.find({id, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d}); it != g_attrs.end())
        out.max_threads_per_block = it->second;
  }
  if (shared == 0 && !cooperative) return out;  // every launch's path: nothing more to look up
  const bool kernel = is_library_kernel(id);
  const int attr_dev = kernel ? static_cast<int>(dev) : -1;
  std::vector<uint64_t> functions;  // a kernel's: a set on one of them changes what the kernel launches with
  if (kernel) functions = functions_of_kernel(id);
  auto dynamic_shared_locked = [&]() -> long long {
    if (auto it = g_dynamic_shared_sets.find(id); it != g_dynamic_shared_sets.end() &&
                                                  it->second.generation == g_generation &&
                                                  (it->second.dev < 0 || it->second.dev == attr_dev)) {
      bool functions_set = false;
      for (uint64_t f : functions) functions_set |= g_dynamic_shared_sets.count(f) != 0;
      if (!functions_set) return it->second.value;
    }
    if (kernel) return -1;  // a kernel's own attribute is not what a launch of it uses once its function was set
    auto gen = g_attrs_generation.find({id, -1});
    auto a = g_attrs.find({id, CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES, -1});
    return gen != g_attrs_generation.end() && gen->second == g_generation && a != g_attrs.end() ? a->second : -1;
  };
  bool ask = false;
  {
    std::lock_guard lk(mu());
    out.max_dynamic_shared = dynamic_shared_locked();
    if (out.max_dynamic_shared < 0 && !kernel && default_shared > 0 && shared > default_shared)
      ask = g_limits_asked.insert(id).second;
    if (cooperative && multiprocessors > 0) {
      const auto key = std::make_tuple(id, static_cast<int>(threads), static_cast<size_t>(shared), 0u);
      auto o = g_occupancy.find(key);
      auto gen = g_occupancy_generation.find(key);
      if (o != g_occupancy.end() && gen != g_occupancy_generation.end() && gen->second == g_generation)
        out.max_coresident_blocks = static_cast<long long>(o->second) * multiprocessors;
    }
  }
  if (ask) {
    fetch_all_attributes(id, -1);
    std::lock_guard lk(mu());
    out.max_dynamic_shared = dynamic_shared_locked();
    if (auto it = g_attrs.find({id, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, -1}); it != g_attrs.end())
      out.max_threads_per_block = it->second;
  }
  return out;
}

void forget_cached_answers() {
  {
    std::lock_guard lk(mu());
    ++g_generation;
    g_attrs.clear();
    g_limits.clear();
    g_limits_set.clear();
    g_priorities.clear();
    g_api_versions.clear();
    g_occupancy.clear();
    g_dynamic_smem.clear();
    g_clusters.clear();
    g_kernel_sets.clear();
    g_func_sets.clear();
  }
  forget_kernel_functions();
}

}  // namespace rgpu::client

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuKernelGetAttribute(int* pi, CUfunction_attribute attrib, CUkernel kernel, CUdevice dev) {
  rgpu::client::trace_call("cuKernelGetAttribute");
  if (!kernel) return rgpu_fwd_cuKernelGetAttribute(pi, attrib, kernel, dev);
  if (dev < 0) return rgpu_fwd_cuKernelGetAttribute(pi, attrib, kernel, dev);  // the driver's error
  return attribute(handle_id(kernel), static_cast<int>(attrib), static_cast<int>(dev), pi,
                   [&](int* v) { return rgpu_fwd_cuKernelGetAttribute(v, attrib, kernel, dev); });
}

RGPU_EXPORT CUresult CUDAAPI cuFuncGetAttribute(int* pi, CUfunction_attribute attrib, CUfunction hfunc) {
  rgpu::client::trace_call("cuFuncGetAttribute");
  if (!hfunc) return rgpu_fwd_cuFuncGetAttribute(pi, attrib, hfunc);
  return attribute(handle_id(hfunc), static_cast<int>(attrib), -1, pi,
                   [&](int* v) { return rgpu_fwd_cuFuncGetAttribute(v, attrib, hfunc); });
}

RGPU_EXPORT CUresult CUDAAPI cuKernelSetAttribute(CUfunction_attribute attrib, int val, CUkernel kernel, CUdevice dev) {
  if (!kernel) return rgpu_fwd_cuKernelSetAttribute(attrib, val, kernel, dev);
  if (CUresult rc = checked_set(rgpu::op::cuKernelSetAttribute, handle_id(kernel), dev, attrib, val)) return rc;
  const auto key = std::make_tuple(handle_id(kernel), static_cast<int>(attrib), static_cast<int>(dev));
  const auto ids = kernel_and_functions(handle_id(kernel));
  {
    std::lock_guard lk(mu());
    auto it = g_kernel_sets.find(key);
    if (it != g_kernel_sets.end() && it->second == val) {  // already set (one-way: its error, if any, is on its way)
      rgpu::client::trace_call("cuKernelSetAttribute");
      return CUDA_SUCCESS;
    }
    g_kernel_sets[key] = val;
    forget_attrs_of_locked(ids);
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
      g_dynamic_shared_sets[handle_id(kernel)] = {val, g_generation, static_cast<int>(dev)};
  }
  note_set(handle_id(kernel), "k" + std::to_string(attrib) + "@" + std::to_string(rgpu::client::server_device(dev)), val);
  return rgpu_fwd_cuKernelSetAttribute(attrib, val, kernel, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuKernelSetCacheConfig(CUkernel kernel, CUfunc_cache config, CUdevice dev) {
  const auto ids = kernel_and_functions(handle_id(kernel));
  {
    std::lock_guard lk(mu());
    forget_attrs_of_locked(ids);
  }
  note_set(handle_id(kernel), "kc@" + std::to_string(rgpu::client::server_device(dev)), config);
  return rgpu_fwd_cuKernelSetCacheConfig(kernel, config, dev);
}

RGPU_EXPORT CUresult CUDAAPI cuFuncSetAttribute(CUfunction hfunc, CUfunction_attribute attrib, int value) {
  if (hfunc) {
    CUdevice dev = -1;
    rgpu::client::contexts::device_of(rgpu::client::contexts::current(), &dev);
    if (CUresult rc = checked_set(rgpu::op::cuFuncSetAttribute, handle_id(hfunc), dev, attrib, value)) return rc;
    const auto key = std::make_pair(handle_id(hfunc), static_cast<int>(attrib));
    {
      std::lock_guard lk(mu());
      auto it = g_func_sets.find(key);
      if (it != g_func_sets.end() && it->second == value) {  // already set (one-way, as a kernel's)
        rgpu::client::trace_call("cuFuncSetAttribute");
        return CUDA_SUCCESS;
      }
    }
    forget_attrs_and_occupancy();
    note_set(handle_id(hfunc), "f" + std::to_string(attrib) + current_device_tag(), value);
    std::lock_guard lk(mu());
    g_func_sets[key] = value;
    if (attrib == CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES)
      g_dynamic_shared_sets[handle_id(hfunc)] = {value, g_generation, -1};
  }
  return rgpu_fwd_cuFuncSetAttribute(hfunc, attrib, value);
}

RGPU_EXPORT CUresult CUDAAPI cuFuncSetCacheConfig(CUfunction hfunc, CUfunc_cache config) {
  forget_attrs_and_occupancy();
  note_set(handle_id(hfunc), "fc" + current_device_tag(), config);
  return rgpu_fwd_cuFuncSetCacheConfig(hfunc, config);
}

RGPU_EXPORT CUresult CUDAAPI cuCtxGetLimit(size_t* pvalue, CUlimit limit) {
  rgpu::client::trace_call("cuCtxGetLimit");
  CUcontext ctx = rgpu::client::contexts::current();
  if (limit == CU_LIMIT_STACK_SIZE || !ctx) return rgpu_fwd_cuCtxGetLimit(pvalue, limit);
  bool set_here;
  {
    std::lock_guard lk(mu());
    set_here = g_limits_set.count(ctx) != 0;
  }
  return cached(g_limits, std::make_pair(ctx, static_cast<int>(limit)), pvalue, [&](size_t* v) {
    return lasting_number(set_here ? std::string() : device_key("limit", std::to_string(limit)), v,
                          [&](size_t* asked) { return rgpu_fwd_cuCtxGetLimit(asked, limit); });
  });
}

RGPU_EXPORT CUresult CUDAAPI cuCtxSetLimit(CUlimit limit, size_t value) {
  {
    CUcontext ctx = rgpu::client::contexts::current();
    std::lock_guard lk(mu());
    for (auto it = g_limits.begin(); it != g_limits.end();) it = it->first.first == ctx ? g_limits.erase(it) : ++it;
    g_limits_set.insert(ctx);
  }
  return rgpu_fwd_cuCtxSetLimit(limit, value);
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(int* numBlocks, CUfunction func,
                                                                                 int blockSize, size_t dynamicSMemSize,
                                                                                 unsigned int flags) {
  rgpu::client::trace_call("cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags");
  if (!func) return rgpu_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize,
                                                                                  dynamicSMemSize, flags);
  const auto key = std::make_tuple(handle_id(func), blockSize, dynamicSMemSize, flags);
  uint64_t generation;
  {
    std::lock_guard lk(mu());
    generation = g_generation;
  }
  bool asked = false;
  CUresult rc = cached(g_occupancy, key, numBlocks,
                [&](int* v) {
                  asked = true;
                  return lasting_number(
                      function_key("occupancy", func,
                                   std::to_string(blockSize) + "|" + std::to_string(dynamicSMemSize) + "|" +
                                       std::to_string(flags)),
                      v,
                      [&](int* asked) {
                        return rgpu_fwd_cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(asked, func, blockSize,
                                                                                             dynamicSMemSize, flags);
                      });
                });
  if (rc == CUDA_SUCCESS && asked) {
    std::lock_guard lk(mu());
    g_occupancy_generation[key] = generation;
  }
  return rc;
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyAvailableDynamicSMemPerBlock(size_t* dynamicSmemSize, CUfunction func,
                                                                     int numBlocks, int blockSize) {
  rgpu::client::trace_call("cuOccupancyAvailableDynamicSMemPerBlock");
  if (!func) return rgpu_fwd_cuOccupancyAvailableDynamicSMemPerBlock(dynamicSmemSize, func, numBlocks, blockSize);
  return cached(g_dynamic_smem, std::make_tuple(handle_id(func), numBlocks, blockSize), dynamicSmemSize,
                [&](size_t* v) {
                  return lasting_number(function_key("dynamic-smem", func,
                                                     std::to_string(numBlocks) + "|" + std::to_string(blockSize)),
                                        v, [&](size_t* asked) {
                                          return rgpu_fwd_cuOccupancyAvailableDynamicSMemPerBlock(asked, func, numBlocks,
                                                                                                  blockSize);
                                        });
                });
}

RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveBlocksPerMultiprocessor(int* numBlocks, CUfunction func, int blockSize,
                                                                        size_t dynamicSMemSize) {
  return cuOccupancyMaxActiveBlocksPerMultiprocessorWithFlags(numBlocks, func, blockSize, dynamicSMemSize, 0);
}

// Wire layout: protocol/wire/occupancy.h.
RGPU_EXPORT CUresult CUDAAPI cuOccupancyMaxActiveClusters(int* numClusters, CUfunction func,
                                                          const CUlaunchConfig* config) {
  rgpu::client::trace_call("cuOccupancyMaxActiveClusters");
  if (!numClusters || !config) return CUDA_ERROR_INVALID_VALUE;
  if (!func) return CUDA_ERROR_INVALID_HANDLE;
  if (config->numAttrs && !config->attrs) return CUDA_ERROR_INVALID_VALUE;
  // A grid the cluster shape does not divide is the driver's to refuse: asked, never cached.
  bool divisible = true;
  int cluster_attr = -1;
  for (unsigned i = 0; i < config->numAttrs; ++i) {
    const CUlaunchAttribute& a = config->attrs[i];
    if (a.id != CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION) continue;
    const auto& d = a.value.clusterDim;
    divisible = d.x && d.y && d.z && config->gridDimX % d.x == 0 && config->gridDimY % d.y == 0 &&
                config->gridDimZ % d.z == 0;
    cluster_attr = static_cast<int>(i);
  }
  const auto key = std::make_pair(handle_id(func), cluster_key(*config));
  auto from_cache = [&](CUresult* rc) {
    std::lock_guard lk(mu());
    auto it = g_clusters.find(key);
    if (it == g_clusters.end()) return false;
    *rc = it->second.first;
    if (*rc == CUDA_SUCCESS) *numClusters = it->second.second;
    return true;
  };
  CUresult rc;
  if (divisible && from_cache(&rc)) return rc;
  if (divisible && cluster_attr >= 0 && config->attrs[cluster_attr].value.clusterDim.y == 1 &&
      config->attrs[cluster_attr].value.clusterDim.z == 1 &&
      fetch_cluster_table(func, *config, static_cast<unsigned>(cluster_attr)) && from_cache(&rc))
    return rc;
  Call c(rgpu::op::cuOccupancyMaxActiveClusters, rgpu::client::kWaits);
  put_cluster_query(c.args(), func, *config);
  rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  int32_t clusters = 0;
  if (!rgpu::proto::wire::read_cluster_count(c.reply(), &clusters)) return CUDA_ERROR_UNKNOWN;
  *numClusters = clusters;
  std::lock_guard lk(mu());
  if (divisible) g_clusters[key] = {CUDA_SUCCESS, clusters};
  return CUDA_SUCCESS;
}

// A device's stream priority range: asked once per context, and kept across runs.
RGPU_EXPORT CUresult CUDAAPI cuCtxGetStreamPriorityRange(int* leastPriority, int* greatestPriority) {
  rgpu::client::trace_call("cuCtxGetStreamPriorityRange");
  CUcontext ctx = rgpu::client::contexts::current();
  if (!ctx) return rgpu_fwd_cuCtxGetStreamPriorityRange(leastPriority, greatestPriority);
  std::pair<int, int> range;
  CUresult rc = cached(g_priorities, ctx, &range, [&](std::pair<int, int>* out) {
    const std::string key = device_key("stream-priorities", "");
    std::string stored;
    std::vector<std::pair<long long, long long>> kept;  // "least:greatest,"
    if (!key.empty() && rgpu::client::answer_store::lookup(key, &stored) && parse_pairs(stored, ':', &kept) &&
        kept.size() == 1) {
      *out = {static_cast<int>(kept[0].first), static_cast<int>(kept[0].second)};
      return CUDA_SUCCESS;
    }
    CUresult r = rgpu_fwd_cuCtxGetStreamPriorityRange(&out->first, &out->second);
    if (r == CUDA_SUCCESS && !key.empty())
      rgpu::client::answer_store::store(key, std::to_string(out->first) + ":" + std::to_string(out->second) + ",");
    return r;
  });
  if (rc != CUDA_SUCCESS) return rc;
  if (leastPriority) *leastPriority = range.first;
  if (greatestPriority) *greatestPriority = range.second;
  return CUDA_SUCCESS;
}

// The API version a context was made with: asked once per context (cudart asks at start-up), and
// kept across runs per device (every context the shim makes is made the same way).
RGPU_EXPORT CUresult CUDAAPI cuCtxGetApiVersion(CUcontext ctx, unsigned int* version) {
  rgpu::client::trace_call("cuCtxGetApiVersion");
  CUcontext key = ctx ? ctx : rgpu::client::contexts::current();
  CUdevice dev = -1;
  if (!key || !rgpu::client::contexts::device_of(key, &dev)) return rgpu_fwd_cuCtxGetApiVersion(ctx, version);
  return cached(g_api_versions, key, version, [&](unsigned int* out) {
    return lasting_number(device_key("ctx-api-version", "", dev), out,
                          [&](unsigned int* v) { return rgpu_fwd_cuCtxGetApiVersion(ctx, v); });
  });
}

// Whether modules load lazily is the server's setting, fixed for its life: in the snapshot (older
// servers: asked once).
RGPU_EXPORT CUresult CUDAAPI cuModuleGetLoadingMode(CUmoduleLoadingMode* mode) {
  static std::mutex once_mu;
  static CUmoduleLoadingMode known{};
  static bool asked = false;
  if (!mode) return CUDA_ERROR_INVALID_VALUE;
  if (rgpu::client::connection() && rgpu::client::snapshot().loading_mode != 0) {
    rgpu::client::trace_call("cuModuleGetLoadingMode");
    *mode = static_cast<CUmoduleLoadingMode>(rgpu::client::snapshot().loading_mode);
    return CUDA_SUCCESS;
  }
  std::lock_guard lk(once_mu);
  if (!asked) {
    CUresult rc = rgpu_fwd_cuModuleGetLoadingMode(&known);
    if (rc != CUDA_SUCCESS) return rc;
    asked = true;
  } else {
    rgpu::client::trace_call("cuModuleGetLoadingMode");
  }
  *mode = known;
  return CUDA_SUCCESS;
}

}  // extern "C"
