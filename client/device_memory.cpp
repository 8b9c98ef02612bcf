// Implementation of client/device_memory.h.
#include "client/device_memory.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "client/answer_store.h"
#include "client/call.h"
#include "client/contexts.h"
#include "client/runtime.h"
#include "common/env.h"
#include "common/log.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"

namespace rgpu::client::device_memory {
namespace {

struct Ahead {
  std::vector<CUdeviceptr> spare;  // allocated, not handed out
  uint32_t next_extra = 1;         // how many to ask for with the next refill
};

std::mutex g_mu;
std::map<CUdeviceptr, size_t> g_held;                               // base -> size
std::map<std::pair<CUcontext, size_t>, Ahead> g_ahead;              // (context, size) -> spares
uint64_t g_ahead_bytes = 0;

// What this run allocated: size -> cuMemAlloc calls (client/device_memory.h "Predicted").
std::map<size_t, uint32_t> g_asked;
uint64_t g_calls = 0;
bool g_predicted = false;  // the first allocation looked for a prediction
std::string g_program;     // program_key(), from the first allocation ("" when not kept)
std::map<size_t, uint32_t> g_previous;  // what the last run allocated (the prediction)

// The key of this program's allocations across runs: the device, the executable and its first
// argument that is not an option (a Python program's script).
std::string program_key() {
  std::string device = answer_store::device_tag(-1);
  if (device.empty() || !answer_store::enabled()) return "";
  FILE* f = fopen("/proc/self/cmdline", "r");
  if (!f) return "";
  std::vector<std::string> argv(1);
  for (int c; (c = fgetc(f)) != EOF && argv.size() < 64;) {
    if (c == 0) argv.emplace_back();
    else argv.back().push_back(static_cast<char>(c));
  }
  fclose(f);
  std::string key = "allocs|" + device + "|" + argv[0];
  for (size_t i = 1; i < argv.size(); ++i) {
    if (argv[i].empty() || argv[i][0] == '-') continue;
    key += " " + argv[i];
    break;
  }
  return key.find_first_of("\t\n") == std::string::npos ? key : "";
}

// Keeps what this run allocated (g_mu not held). Until the run ends (`whole`) what is kept
// also holds the last run's counts where they are larger, so a run cut short does not leave a
// smaller prediction than the run before it.
void remember_sizes(bool whole) {
  std::string value, key;
  {
    std::lock_guard lk(g_mu);
    key = g_program;
    std::map<size_t, uint32_t> counts = g_asked;
    if (!whole)
      for (const auto& [size, n] : g_previous) counts[size] = std::max(counts[size], n);
    for (const auto& [size, n] : counts) value += std::to_string(size) + ":" + std::to_string(n) + ",";
  }
  if (!key.empty()) answer_store::store(key, value);
}

// At the first cuMemAlloc: what the previous run of this program allocated, made now in one round
// trip (kOpAllocMany) and kept ahead; at most a quarter of the device's memory.
void predict(CUcontext ctx, size_t first_size) {
  std::string key = program_key();
  {
    std::lock_guard lk(g_mu);
    g_program = key;
  }
  std::string stored;
  if (key.empty() || !answer_store::lookup(key, &stored)) return;
  CUdevice dev = 0;
  if (!contexts::device_of(ctx, &dev)) return;
  const proto::DeviceInfo* device = device_info(dev);
  if (!device) return;
  const uint64_t budget = std::min<uint64_t>(device->total_mem / 4, proto::kMaxAllocManyBytes);
  std::vector<std::pair<long long, long long>> kept;  // "size:count,"
  if (!answer_store::parse_pairs(stored, ':', 1, std::numeric_limits<long long>::max(), &kept)) return;
  proto::wire::AllocSizes want;
  uint64_t bytes = 0, count = 0;
  for (const auto& [stored_size, stored_n] : kept) {
    if (want.size() == proto::kMaxAllocMany) break;
    if (stored_n > proto::kMaxAllocManyCount) return;
    const uint64_t size = static_cast<uint64_t>(stored_size);
    uint64_t n = static_cast<uint64_t>(stored_n);
    {
      std::lock_guard lk(g_mu);
      g_previous[size] = static_cast<uint32_t>(n);
    }
    if (size == first_size) --n;  // the allocation being asked for now is one of them
    n = std::min<uint64_t>(n, (budget - bytes) / size);
    n = std::min<uint64_t>(n, proto::kMaxAllocManyCount - count);
    if (n == 0) continue;
    want.emplace_back(size, static_cast<uint32_t>(n));
    bytes += size * n;
    count += n;
  }
  want.emplace_back(first_size, 1);
  Call c(proto::kOpAllocMany, kWaits);
  proto::wire::put_alloc_many(c.args(), want);
  CUresult rc = c.invoke();
  log::debug("predicted allocations: %zu sizes, %llu bytes: %d", want.size(), static_cast<unsigned long long>(bytes), rc);
  if (rc != CUDA_SUCCESS) return;
  std::vector<std::vector<uint64_t>> made;
  if (!proto::wire::read_alloc_many_reply(c.reply(), &made) || made.size() != want.size()) return;
  for (size_t i = 0; i < want.size(); ++i)
    if (made[i].size() > want[i].second) return;
  std::lock_guard lk(g_mu);
  for (size_t i = 0; i < want.size(); ++i) {
    const uint64_t size = want[i].first;
    Ahead& a = g_ahead[{ctx, size}];
    a.spare.insert(a.spare.end(), made[i].begin(), made[i].end());
    g_ahead_bytes += size * made[i].size();
  }
}

void hold_locked(CUdeviceptr p, size_t size) { g_held[p] = size; }

// Frees every allocation held ahead (the server is out of memory). Sent one-way, in order before
// the retried request.
void release_ahead() {
  std::vector<CUdeviceptr> all;
  {
    std::lock_guard lk(g_mu);
    for (auto& [key, a] : g_ahead) {
      all.insert(all.end(), a.spare.begin(), a.spare.end());
      a.spare.clear();
      a.next_extra = 1;
    }
    g_ahead_bytes = 0;
  }
  for (CUdeviceptr p : all) {
    Call c(op::cuMemFree_v2, kOneWay);
    c.args().put<uint64_t>(p);
    c.invoke();
  }
}

// One kOpAllocAhead round trip: the allocation, plus up to `extra` more of `size` kept for later.
CUresult ask(CUcontext ctx, size_t size, uint32_t extra, CUdeviceptr* dptr) {
  Call c(proto::kOpAllocAhead, kWaits);
  proto::wire::put_alloc_ahead(c.args(), {size, extra});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t first = 0;
  std::vector<uint64_t> more;
  if (!proto::wire::read_alloc_ahead_reply(c.reply(), &first, &more) || more.size() > extra) return CUDA_ERROR_UNKNOWN;
  const auto n = static_cast<uint32_t>(more.size());
  std::lock_guard lk(g_mu);
  hold_locked(first, size);
  if (n) {
    Ahead& a = g_ahead[{ctx, size}];
    a.spare.insert(a.spare.end(), more.begin(), more.end());
    g_ahead_bytes += uint64_t{n} * size;
  }
  *dptr = first;
  return CUDA_SUCCESS;
}

}  // namespace

CUresult allocate(CUdeviceptr* dptr, size_t size) {
  trace_call("cuMemAlloc_v2");
  if (!dptr) return CUDA_ERROR_INVALID_VALUE;
  if (size == 0) return CUDA_ERROR_INVALID_VALUE;
  CUcontext ctx = contexts::current();
  uint32_t extra = 0;
  bool checkpoint = false, first = false;
  if (ctx && env::get().alloc_ahead) {
    std::lock_guard lk(g_mu);
    ++g_asked[size];
    ++g_calls;
    checkpoint = (g_calls & (g_calls - 1)) == 0 && g_calls >= 8;  // 8, 16, 32, ...
    first = !g_predicted;
    g_predicted = true;
  }
  if (first) {
    predict(ctx, size);
    std::atexit([] { remember_sizes(true); });
  }
  if (checkpoint) remember_sizes(false);
  if (ctx && env::get().alloc_ahead) {
    std::lock_guard lk(g_mu);
    Ahead& a = g_ahead[{ctx, size}];
    if (!a.spare.empty()) {
      *dptr = a.spare.back();
      a.spare.pop_back();
      g_ahead_bytes -= size;
      hold_locked(*dptr, size);
      return CUDA_SUCCESS;
    }
    // A refill: twice as many as last time, within what may be held ahead in all.
    uint64_t room = g_ahead_bytes >= kAheadBytes ? 0 : kAheadBytes - g_ahead_bytes;
    room = std::min<uint64_t>(room, proto::kMaxAllocAheadBytes);
    extra = static_cast<uint32_t>(std::min<uint64_t>({a.next_extra, room / size, proto::kMaxAllocAhead}));
    a.next_extra = std::min<uint32_t>(a.next_extra * 2, proto::kMaxAllocAhead);
  }
  log::debug("cuMemAlloc(%zu): asking the server, %u ahead", size, extra);
  CUresult rc = ask(ctx, size, extra, dptr);
  if (rc == CUDA_ERROR_OUT_OF_MEMORY && ahead_bytes() > 0) {
    release_ahead();
    rc = ask(ctx, size, 0, dptr);
  }
  return rc;
}

void forget(CUdeviceptr ptr) {
  std::lock_guard lk(g_mu);
  g_held.erase(ptr);
}

bool contains(CUdeviceptr ptr, size_t n) {
  std::lock_guard lk(g_mu);
  auto it = g_held.upper_bound(ptr);
  if (it == g_held.begin()) return false;
  --it;
  return ptr - it->first <= it->second && n <= it->second - (ptr - it->first);
}

uint64_t ahead_bytes() {
  std::lock_guard lk(g_mu);
  return g_ahead_bytes;
}

}  // namespace rgpu::client::device_memory
