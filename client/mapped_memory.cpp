// Implementation of client/mapped_memory.h.
#include "client/mapped_memory.h"

#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "client/call.h"
#include "client/runtime.h"
#include "protocol/op_classes.h"
#include "common/page_diff.h"
#include "common/wire.h"
#include "protocol/messages.h"

namespace rgpu::client::mapped {
namespace {

constexpr size_t kPage = 4096;
// Largest kOpMappedWrite payload; longer runs of changed pages go in several.
constexpr size_t kMaxWrite = 4u << 20;

struct Range {
  uint8_t* base = nullptr;
  size_t size = 0;
  CUdeviceptr dptr = 0;
  std::vector<uint8_t> shadow;  // what the server's copy last held
};

std::mutex& mu() {
  static auto* m = new std::mutex;  // leaked: used from exit handlers
  return *m;
}
std::map<uintptr_t, Range>& ranges() {
  static auto* r = new std::map<uintptr_t, Range>;
  return *r;
}

Range* find_locked(uintptr_t p) {
  auto it = ranges().upper_bound(p);
  if (it == ranges().begin()) return nullptr;
  --it;
  Range& r = it->second;
  return p - it->first < r.size ? &r : nullptr;
}

}  // namespace

std::atomic<int> g_count{0};

CUresult map(void* base, size_t size, unsigned flags, CUdeviceptr* dptr) {
  if (Connection* conn = connection()) conn->set_mapped_update_handler(apply_update);
  Call c(proto::kOpMappedAlloc, kWaits);
  c.args().put_u64(reinterpret_cast<uintptr_t>(base));
  c.args().put_u64(size);
  c.args().put_u32(flags);
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t d = c.reply().u64();
  c.reply().u64();  // the server's address, for traces
  if (!c.reply().ok()) return CUDA_ERROR_UNKNOWN;
  Range r;
  r.base = static_cast<uint8_t*>(base);
  r.size = size;
  r.dptr = d;
  r.shadow.assign(size, 0);  // the server's copy starts zeroed; push() sends what differs
  {
    std::lock_guard lk(mu());
    ranges()[reinterpret_cast<uintptr_t>(base)] = std::move(r);
    g_count.fetch_add(1, std::memory_order_relaxed);
  }
  *dptr = d;
  return CUDA_SUCCESS;
}

bool unmap(void* base) {
  {
    std::lock_guard lk(mu());
    auto it = ranges().find(reinterpret_cast<uintptr_t>(base));
    if (it == ranges().end()) return false;
    ranges().erase(it);
    g_count.fetch_sub(1, std::memory_order_relaxed);
  }
  Call c(proto::kOpMappedFree, kOneWay);
  c.args().put_u64(reinterpret_cast<uintptr_t>(base));
  c.invoke();
  return true;
}

bool device_pointer(const void* p, CUdeviceptr* out) {
  std::lock_guard lk(mu());
  Range* r = find_locked(reinterpret_cast<uintptr_t>(p));
  if (!r) return false;
  *out = r->dptr + (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->base));
  return true;
}

void push(uint32_t thread_id, uint16_t op) {
  if (!op_touches_memory(op)) return;
  // Runs of changed pages are copied out under the lock and sent after it, so the reading
  // thread (apply_update) never waits behind a blocked send.
  struct Run {
    uint64_t base, offset;
    std::vector<uint8_t> bytes;
  };
  std::vector<Run> runs;
  {
    std::lock_guard lk(mu());
    for (auto& [base, r] : ranges()) {
      for_each_changed_run(r.base, r.shadow.data(), r.size, kPage, kMaxWrite, [&](size_t at, size_t n) {
        Run run{base, at, std::vector<uint8_t>(r.base + at, r.base + at + n)};
        std::memcpy(r.shadow.data() + at, run.bytes.data(), n);
        runs.push_back(std::move(run));
        return true;
      });
    }
  }
  Connection* conn = connection();
  if (!conn) return;
  for (const Run& run : runs) {
    uint8_t head[16];
    std::memcpy(head, &run.base, 8);
    std::memcpy(head + 8, &run.offset, 8);
    conn->send_oneway(proto::kOpMappedWrite, thread_id, head, sizeof head, run.bytes.data(), run.bytes.size());
  }
}

bool apply_update(const uint8_t* payload, size_t n) {
  Reader in(payload, n);
  uint64_t base = in.u64(), offset = in.u64();
  if (!in.ok()) return false;
  size_t len = in.left();
  const uint8_t* bytes = in.view(len);
  std::lock_guard lk(mu());
  auto it = ranges().find(base);
  if (it == ranges().end()) return true;  // freed meanwhile: nothing to update
  Range& r = it->second;
  if (offset > r.size || len > r.size - offset) return false;
  std::memcpy(r.base + offset, bytes, len);
  std::memcpy(r.shadow.data() + offset, bytes, len);
  return true;
}

}  // namespace rgpu::client::mapped
