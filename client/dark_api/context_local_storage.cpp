// CONTEXT_LOCAL_STORAGE: a (context, key) -> value store the driver keeps for its libraries
// (cudart and cuBLAS keep their per-context state in it), with a destructor owed when the context
// goes. The table has no size word: slot 0 is put.
//
// Semantics, as the real driver (580.159.04, CUDA 13.0) showed them when probed on the GPU
// machine (client/dark_api/README.md), pinned by context_local_storage_test.cpp:
// - a NULL context means the calling thread's current context; with none, every slot returns
//   CUDA_ERROR_INVALID_CONTEXT. (CUcontext)-1 is also taken to mean the current one, as public
//   notes report (the real driver faults on it in get);
// - get of an absent key returns CUDA_ERROR_INVALID_HANDLE and leaves *value alone;
// - put of a key already present returns CUDA_ERROR_INVALID_HANDLE and keeps the old value;
// - delete removes without calling the destructor; delete of an absent key returns
//   CUDA_ERROR_INVALID_HANDLE;
// - the destructor, (context, key, value), runs when the context is destroyed or the primary
//   context reset (on_context_destroyed), outside every lock, so it may call the driver.
//
// get is the hot slot (753 calls in one torch run): it is answered from a small per-thread cache
// checked against a global generation number, so a repeated get takes no lock at all; a miss
// takes a shared lock. Every change bumps the generation and so invalidates all caches.
#include <cuda.h>

#include <atomic>
#include <cstdint>
#include <mutex>
#include <shared_mutex>
#include <unordered_map>
#include <vector>

#include "client/contexts.h"
#include "client/dark_api/dark_api.h"

namespace rgpu::client::dark {
namespace {

using Destructor = void(CUDAAPI*)(CUcontext, void* key, void* value);

struct Key {
  CUcontext ctx;
  void* key;
  bool operator==(const Key&) const = default;
};
struct KeyHash {
  size_t operator()(const Key& k) const {
    auto a = reinterpret_cast<uintptr_t>(k.ctx), b = reinterpret_cast<uintptr_t>(k.key);
    return static_cast<size_t>((a * 0x9e3779b97f4a7c15ull) ^ b);
  }
};
struct Entry {
  void* value;
  Destructor dtor;
};

std::shared_mutex g_mu;
// Leaked on purpose: libraries call delete from their own exit handlers, after static destructors.
auto* g_store = new std::unordered_map<Key, Entry, KeyHash>();
std::atomic<uint64_t> g_generation{1};

struct CacheLine {
  uint64_t generation = 0;  // 0: empty
  Key key{};
  void* value = nullptr;
  bool present = false;
};
constexpr unsigned kCacheLines = 4;
thread_local CacheLine t_cache[kCacheLines];
thread_local unsigned t_next_line = 0;

// Resolves the context a call names; false when it means "current" and there is none.
bool resolve(CUcontext* ctx) {
  if (*ctx == nullptr || *ctx == reinterpret_cast<CUcontext>(~uintptr_t{0})) *ctx = contexts::current();
  return *ctx != nullptr;
}

CUresult CUDAAPI cls_put(CUcontext ctx, void* key, void* value, Destructor dtor) {
  if (!resolve(&ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  std::unique_lock lock(g_mu);
  if (!g_store->try_emplace(Key{ctx, key}, Entry{value, dtor}).second) return CUDA_ERROR_INVALID_HANDLE;
  g_generation.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cls_delete(CUcontext ctx, void* key) {
  if (!resolve(&ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  std::unique_lock lock(g_mu);
  if (!g_store->erase(Key{ctx, key})) return CUDA_ERROR_INVALID_HANDLE;
  g_generation.fetch_add(1, std::memory_order_release);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI cls_get(void** value, CUcontext ctx, void* key) {
  if (!value) return CUDA_ERROR_INVALID_VALUE;
  if (!resolve(&ctx)) return CUDA_ERROR_INVALID_CONTEXT;
  const Key k{ctx, key};
  uint64_t gen = g_generation.load(std::memory_order_acquire);
  for (const auto& line : t_cache) {
    if (line.generation == gen && line.key == k) {
      if (!line.present) return CUDA_ERROR_INVALID_HANDLE;
      *value = line.value;
      return CUDA_SUCCESS;
    }
  }
  CacheLine fresh;
  fresh.key = k;
  {
    std::shared_lock lock(g_mu);
    fresh.generation = g_generation.load(std::memory_order_acquire);  // stable while we hold the lock
    auto it = g_store->find(k);
    if (it != g_store->end()) {
      fresh.present = true;
      fresh.value = it->second.value;
    }
  }
  t_cache[t_next_line++ % kCacheLines] = fresh;
  if (!fresh.present) return CUDA_ERROR_INVALID_HANDLE;
  *value = fresh.value;
  return CUDA_SUCCESS;
}

}  // namespace

void cls_context_destroyed(CUcontext ctx) {
  struct Owed {
    void* key;
    Entry entry;
  };
  std::vector<Owed> owed;
  {
    std::unique_lock lock(g_mu);
    for (auto it = g_store->begin(); it != g_store->end();) {
      if (it->first.ctx == ctx) {
        owed.push_back({it->first.key, it->second});
        it = g_store->erase(it);
      } else {
        ++it;
      }
    }
    g_generation.fetch_add(1, std::memory_order_release);
  }
  for (const auto& o : owed)
    if (o.entry.dtor) o.entry.dtor(ctx, o.key, o.entry.value);
}

const void* context_local_storage_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kContextLocalStorage, 4>(false);
    t[0] = slot_fn(&cls_put);
    t[1] = slot_fn(&cls_delete);
    t[2] = slot_fn(&cls_get);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
