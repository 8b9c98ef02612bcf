// Implementation of runtime/readahead.h.
#include "runtime/readahead.h"

#include <torch/library.h>

#include <cstring>
#include <mutex>
#include <unordered_map>
#include <unordered_set>

#include "protocol/torch_wire.h"
#include "runtime/connection.h"
#include "runtime/device.h"

namespace rgpu::torchdev {

using namespace rgpu::torchwire;

namespace {

// Most bytes one kTorchReadMany fetches: bounds the host memory the copies hold.
constexpr uint64_t kBatchBytes = 256ull << 20;

struct Announced {
  uint64_t id;
  c10::weak_intrusive_ptr<c10::StorageImpl> storage;
};

struct State {
  std::mutex mu;
  uint64_t generation = 0;         // of the announcements and copies below
  std::vector<Announced> announced;  // in announcement order, not yet fetched
  std::unordered_set<uint64_t> announced_ids;
  std::unordered_map<uint64_t, at::Tensor> copies;  // storage id -> its bytes (cpu, uint8)
};

State& state() {
  static auto* s = new State;  // leaked: reads may come from exit handlers
  return *s;
}

// Drops what an earlier generation left (under s.mu).
void refresh_locked(State& s, uint64_t generation) {
  if (s.generation == generation) return;
  s.generation = generation;
  s.announced.clear();
  s.announced_ids.clear();
  s.copies.clear();
}

// Fetches the announced storage at index first (at most kBatchBytes) and those after it (then
// those before it) while the batch stays within kBatchBytes, in one round trip (under s.mu).
void fetch_locked(State& s, Connection& c, size_t first) {
  struct Pick {
    uint64_t id, nbytes;
  };
  std::vector<Pick> picks;
  uint64_t bytes = 0;
  const size_t n = s.announced.size();
  std::vector<bool> taken(n, false);
  for (size_t k = 0; k < n && picks.size() < kMaxReadMany; ++k) {
    const size_t i = (first + k) % n;
    c10::intrusive_ptr<c10::StorageImpl> st = s.announced[i].storage.lock();
    if (!st) {
      taken[i] = true;  // freed since: nothing to read
      continue;
    }
    const uint64_t nbytes = st->nbytes();
    if (bytes + nbytes > kBatchBytes) continue;
    taken[i] = true;
    bytes += nbytes;
    picks.push_back({s.announced[i].id, nbytes});
  }
  std::vector<Announced> left;
  for (size_t i = 0; i < n; ++i)
    if (!taken[i]) left.push_back(std::move(s.announced[i]));
  s.announced.swap(left);
  if (picks.empty()) return;
  Writer w;
  w.put_u32(static_cast<uint32_t>(picks.size()));
  std::vector<at::Tensor> hosts;
  std::vector<Connection::Sink> sinks;
  for (const Pick& p : picks) {
    s.announced_ids.erase(p.id);
    TensorDesc d;  // the whole storage, as flat bytes
    d.storage = p.id;
    d.dtype = static_cast<int8_t>(at::kByte);
    d.sizes = {static_cast<int64_t>(p.nbytes)};
    d.strides = {1};
    put_desc(w, d);
    hosts.push_back(at::empty({static_cast<int64_t>(p.nbytes)}, at::TensorOptions().dtype(at::kByte)));
    sinks.push_back({hosts.back().data_ptr(), p.nbytes});
  }
  c.call_scatter(kTorchReadMany, w, "read", sinks);
  for (size_t i = 0; i < picks.size(); ++i) s.copies[picks[i].id] = std::move(hosts[i]);
}

}  // namespace

void announce_storages(const std::vector<c10::Storage>& storages) {
  Connection* c = Connection::existing();
  if (!c) return;  // nothing on the device yet
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  refresh_locked(s, c->generation());
  for (const c10::Storage& st : storages) {
    if (!st || st.device().type() != kDeviceType || st.nbytes() == 0) continue;
    uint64_t id = storage_id(st);
    if (s.copies.count(id) || !s.announced_ids.insert(id).second) continue;
    s.announced.push_back({id, st.getWeakStorageImpl()});
  }
}

void announce_reads(const std::vector<at::Tensor>& tensors) {
  std::vector<c10::Storage> storages;
  storages.reserve(tensors.size());
  for (const at::Tensor& t : tensors)
    if (t.defined() && t.device().type() == kDeviceType && t.has_storage()) storages.push_back(t.storage());
  announce_storages(storages);
}

at::Tensor readahead_view(const at::Tensor& src) {
  Connection* c = Connection::existing();
  if (!c || !src.has_storage()) return {};
  const c10::Storage& st = src.storage();
  const uint64_t id = storage_id(st);
  State& s = state();
  std::lock_guard<std::mutex> lk(s.mu);
  refresh_locked(s, c->generation());
  auto it = s.copies.find(id);
  if (it == s.copies.end()) {
    if (!s.announced_ids.count(id)) return {};
    size_t at = 0;
    while (s.announced[at].id != id) ++at;
    if (st.nbytes() > kBatchBytes) {  // read alone, straight into its destination
      s.announced.erase(s.announced.begin() + static_cast<ptrdiff_t>(at));
      s.announced_ids.erase(id);
      return {};
    }
    fetch_locked(s, *c, at);
    it = s.copies.find(id);
    if (it == s.copies.end()) return {};  // too large for a batch: read alone
  }
  at::Tensor bytes = it->second;
  if (static_cast<uint64_t>(bytes.numel()) != st.nbytes()) {  // resized since: cannot be (it posts)
    s.copies.erase(it);
    return {};
  }
  const bool whole = src.storage_offset() == 0 && src.is_contiguous() && src.nbytes() == st.nbytes();
  if (whole) s.copies.erase(it);
  at::Tensor view = at::empty({0}, bytes.options().dtype(src.scalar_type()));
  view.set_(bytes.storage(), src.storage_offset(), src.sizes(), src.strides());
  return view;
}

namespace {

void announce_reads_op(const std::vector<at::Tensor>& tensors) { announce_reads(tensors); }

// torch.save's tagger sees storages, not tensors.
void announce_storage_op(const c10::Storage& s) { announce_storages({s}); }

}  // namespace

TORCH_LIBRARY_FRAGMENT(rgpu, m) {
  m.def("announce_reads(Tensor[] tensors) -> ()", &announce_reads_op);
  m.def("announce_storage(Storage storage) -> ()", &announce_storage_op);
}

}  // namespace rgpu::torchdev
