// Implementation of client/modules.h.
#include "client/modules.h"

#include <atomic>
#include <mutex>
#include <set>

#include "client/answer_store.h"
#include "client/call.h"
#include "client/progress.h"
#include "client/runtime.h"
#include "client/stats.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "protocol/messages.h"
#include "protocol/wire/module.h"

namespace rgpu::client {

namespace {

// Servers that do not know kOpModuleByHash (they answer NOT_SUPPORTED) are not asked again.
std::atomic<bool> g_by_hash_unsupported{false};

// Hashes the server's cache holds: from the snapshot at connect, plus every image this process
// sent (the server keeps what it loaded). Leaked on purpose, like the rest of the client's state.
std::mutex g_cached_mu;
auto& g_cached = *new std::set<crypto::Digest>();
bool g_cached_loaded = false;

bool server_has(const crypto::Digest& hash) {
  std::lock_guard<std::mutex> lock(g_cached_mu);
  if (!g_cached_loaded) {
    for (const auto& h : snapshot().cached_modules) g_cached.insert(h);
    g_cached_loaded = true;
  }
  return g_cached.count(hash) != 0;
}

// After an image was sent: the server's cache keeps it, if the server has one.
void server_now_has(const crypto::Digest& hash) {
  if (!snapshot().module_cache_on) return;
  std::lock_guard<std::mutex> lock(g_cached_mu);
  g_cached.insert(hash);
}

// Asks the server to load the image from its module cache by SHA-256 (protocol/messages.h
// kOpModuleByHash): one round trip, no image bytes, and only for images the server's cache index
// (learned at connect) holds. CUDA_ERROR_NOT_FOUND: send the bytes.
CUresult load_by_hash(uint16_t op, uint64_t id, const crypto::Digest& hash) {
  if (g_by_hash_unsupported.load(std::memory_order_relaxed) || !server_has(hash)) return CUDA_ERROR_NOT_FOUND;
  Call c(proto::kOpModuleByHash, kWaits);
  proto::wire::put_module_by_hash(c.args(), {id, op, hash});
  CUresult rc = c.invoke();
  if (rc != CUDA_ERROR_NOT_FOUND && rc != CUDA_ERROR_NOT_SUPPORTED) return rc;
  // An earlier one-way call's error came back with this reply: report it now, as the load would have.
  if (c.deferred() != CUDA_SUCCESS) return c.deferred();
  if (rc == CUDA_ERROR_NOT_SUPPORTED) g_by_hash_unsupported.store(true, std::memory_order_relaxed);
  return CUDA_ERROR_NOT_FOUND;
}

}  // namespace

// An image without machine code for the server's GPU is compiled there (JIT), which can fail, so
// its load waits for the answer, except when this image already compiled on this GPU and driver
// in an earlier run (kept in the answer store): the same compiler on the same input succeeds
// again, and the load is one-way. PyTorch's warm start on the H200 waited for four such loads.
std::string jit_key(const std::string& digest) {
  if (!answer_store::enabled()) return "";
  std::string device = answer_store::device_tag(-1);
  if (device.empty()) device = answer_store::device_tag(0);  // a library loaded before any context
  return device.empty() ? device : "jit-ok|" + device + "|" + digest;
}

CUresult load_image(uint16_t op, const char* name, const void* image, size_t max_len, uint64_t* id) {
  // A fatbin wrapper (what nvcc registers) points at the fatbin in this process: send that.
  if (image::detect(image, max_len) == image::Kind::kFatbinWrapper) {
    image = image::fatbin_wrapper_data(image, max_len);
    max_len = SIZE_MAX;
    if (!image) return CUDA_ERROR_INVALID_IMAGE;
  }
  size_t n = image::image_size(image, max_len);
  if (n == 0) {
    log::error("%s: the image is not a cubin, fatbin or PTX that rgpu can measure; cannot send it", name);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  if (n > proto::kMaxPayload - 64) {
    log::error("%s: the image is %zu bytes, over rgpu's limit of %u", name, n, proto::kMaxPayload - 64);
    return CUDA_ERROR_INVALID_IMAGE;
  }
  uint64_t minted = mint_handle();
  // Several servers: the module is the current context's server's (client/call.h).
  if (several_servers()) minted |= static_cast<uint64_t>(current_server()) << proto::kHandleServerShift;
  crypto::Digest hash;
  {
    stats::Timer timer(stats::Time::kImageDigest);
    hash = crypto::sha256(image, n);
  }
  image::Image img;
  std::string err;
  bool parsed;
  {
    stats::Timer timer(stats::Time::kImageParse);
    parsed = env::get().image_layouts ? image::parse(image, n, image_arch(), &img, &err)
                                      : (err = "RGPU_IMAGE_LAYOUTS=0", false);
  }
  if (!parsed) log::debug("%s: cannot read kernel layouts from the image (%s); asking the server", name, err.c_str());
  // No round trip to load code (docs/design.md §3): when the client has read the kernels from
  // machine code built for the server's GPU, nothing after the load needs the server's answer, so
  // the load is one-way, by hash when the server's cache index (learned at connect) holds the
  // image, with the bytes otherwise. A load that fails anyway (out of memory) reports its error
  // with the next call that waits, as a failed launch does. PTX (JIT can fail; but see jit_key),
  // images the client cannot read, and RGPU_BATCH=0 wait for the load's answer.
  CUresult rc;
  // RGPU_ONEWAY_LOADS=0 makes every load wait. One-way loads once made PyTorch's cuDNN
  // convolution wrong on the H200: the server ran each client thread's calls on its own worker
  // with no order between threads, so another thread's calls could run before a load (or any
  // one-way call) that had already returned. The server now keeps that order (server/session.cpp
  // note_read/wait_turn; tests/e2e/test_cross_thread.py); the ladder then passed 15/15 on the
  // H200 with one-way loads, GPT losses identical to local.
  const bool may_be_one_way = env::get().oneway_loads && parsed && batching();
  const std::string digest = crypto::hex(hash.data(), hash.size());
  const std::string jit = may_be_one_way && !img.native ? jit_key(digest) : "";
  std::string stored;
  const bool one_way = may_be_one_way && (img.native || (!jit.empty() && answer_store::lookup(jit, &stored)));
  if (!one_way)
    log::debug("%s: the %zu-byte image's load waits (%s)", name, n,
               !parsed ? "kernel layouts unread" : !img.native ? "no machine code for the server's GPU: JIT, not seen before"
                                                                 : "one-way loads off");
  if (one_way && !g_by_hash_unsupported.load(std::memory_order_relaxed) && server_has(hash)) {
    Call c(proto::kOpModuleByHash, kOneWay);
    proto::wire::put_module_by_hash(c.args(), {minted, op, hash});
    rc = c.invoke();
  } else {
    rc = one_way ? CUDA_ERROR_NOT_FOUND : load_by_hash(op, minted, hash);
    if (rc == CUDA_ERROR_NOT_FOUND) {
      Call c(op, one_way ? kOneWay : kWaits);
      proto::wire::put_image_load_head(c.args(), minted, n);
      c.attach(image, n);
      progress::Transfer shown(progress::Kind::kImages, n);
      rc = c.invoke();
      if (rc == CUDA_SUCCESS) server_now_has(hash);
    }
  }
  if (rc != CUDA_SUCCESS) return rc;
  if (!one_way && !jit.empty()) answer_store::store(jit, "1");
  ModuleRegistry::get().add_module(minted, std::move(img), parsed, digest);
  *id = minted;
  return CUDA_SUCCESS;
}

ModuleRegistry& ModuleRegistry::get() {
  static auto* r = new ModuleRegistry();  // never destroyed: calls may come during exit
  return *r;
}

void ModuleRegistry::add_module(uint64_t module_id, image::Image img, bool parsed, std::string digest) {
  std::lock_guard<std::mutex> lock(mu_);
  // The same image loaded twice (a module and a library, say) is two sets of kernels whose
  // attributes are set apart: told apart by how many loads of it came before.
  if (!digest.empty()) digest += "#" + std::to_string(loads_of_digest_[digest]++);
  modules_[module_id] = Module{std::move(img), parsed, std::move(digest)};
}

void ModuleRegistry::remove_module(uint64_t module_id) {
  std::lock_guard<std::mutex> lock(mu_);
  modules_.erase(module_id);
}

bool ModuleRegistry::copy_module(uint64_t from, uint64_t to) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(from);
  if (it == modules_.end()) return false;
  Module copy = it->second;
  modules_[to] = std::move(copy);
  return true;
}

bool ModuleRegistry::kernels(uint64_t module_id, std::vector<image::Kernel>* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module_id);
  if (it == modules_.end() || !it->second.parsed) return false;
  *out = it->second.img.kernels;
  return true;
}

int ModuleRegistry::find_kernel(uint64_t module_id, const std::string& name, image::Kernel* out) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module_id);
  if (it == modules_.end() || !it->second.parsed) return -1;
  for (const auto& k : it->second.img.kernels) {
    if (k.name == name) {
      *out = k;
      return 1;
    }
  }
  return 0;
}

void ModuleRegistry::set_function(uint64_t function_id, const image::Kernel& k) {
  std::lock_guard<std::mutex> lock(mu_);
  functions_[function_id] = std::make_shared<const image::Kernel>(k);
}

void ModuleRegistry::name_function(uint64_t function_id, uint64_t module_id, const std::string& name) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = modules_.find(module_id);
  if (it != modules_.end() && !it->second.digest.empty()) identities_[function_id] = it->second.digest + ":" + name;
}

void ModuleRegistry::same_as(uint64_t function_id, uint64_t kernel_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = identities_.find(kernel_id);
  if (it != identities_.end()) identities_[function_id] = it->second;
}

std::string ModuleRegistry::identity(uint64_t function_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = identities_.find(function_id);
  return it == identities_.end() ? std::string() : it->second;
}

std::shared_ptr<const image::Kernel> ModuleRegistry::function(uint64_t function_id) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = functions_.find(function_id);
  return it == functions_.end() ? nullptr : it->second;
}

}  // namespace rgpu::client
