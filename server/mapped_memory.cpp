// Implementation of server/mapped_memory.h.
#include "server/mapped_memory.h"

#include "server/limits.h"

#include <sys/mman.h>

#include <cstring>
#include <new>
#include <string_view>

#include "common/log.h"
#include "common/page_diff.h"
#include "gen/ops.gen.h"
#include "protocol/messages.h"
#include "protocol/wire/mapped.h"

namespace rgpu::server {
namespace {

constexpr size_t kPage = 4096;
// Largest single mapped buffer a client may ask for.
constexpr uint64_t kMaxMapped = uint64_t(16) << 30;

// Host memory counted against the session's and the server's limits (server/limits.h) while a
// buffer is being made: given back on every failure path unless kept by the buffer.
class Held {
 public:
  Held(uint64_t bytes, const char* what) : bytes_(bytes), ok_(limits::reserve_host(bytes, what)) {}
  ~Held() {
    if (ok_) limits::unreserve_host(bytes_);
  }
  bool ok() const { return ok_; }
  uint64_t bytes() const { return bytes_; }
  void keep() { ok_ = false; }  // the buffer holds it now: its free gives it back

 private:
  uint64_t bytes_;
  bool ok_;
};
// Largest kOpMappedUpdate payload (pages beyond go in further frames).
constexpr size_t kMaxUpdate = 4u << 20;
// More disjoint marked ranges than this in one buffer: the buffer is marked whole instead.
constexpr size_t kMaxRanges = 64;

// What a call that touches memory (protocol/op_classes.h) may write, by its name.
enum class Writes : uint8_t {
  kAnything,    // kernels, graphs, pitched and array copies: any mapped buffer
  kNothing,     // copies into host memory (a staging buffer here) or arrays; host functions
  kDestination  // copies and memsets whose first argument (u64) is the destination
};
Writes classify(uint16_t op) {
  static const std::vector<Writes> table = [] {
    std::vector<Writes> t(65536, Writes::kAnything);
    auto starts = [](std::string_view name, std::string_view prefix) { return name.substr(0, prefix.size()) == prefix; };
    for (uint32_t i = 0; i < t.size(); ++i) {
      const char* n = op::name(static_cast<uint16_t>(i));
      if (!n) continue;
      std::string_view name(n);
      for (const char* p : {"cuMemcpyDtoH", "cuMemcpyAtoH", "cuMemcpyHtoA", "cuMemcpyDtoA", "cuMemcpyAtoA", "cuLaunchHostFunc"})
        if (starts(name, p)) t[i] = Writes::kNothing;
      for (const char* p : {"cuMemcpyHtoD", "cuMemcpyDtoD", "cuMemcpyAtoD", "cuMemcpyPeer", "cuMemsetD8", "cuMemsetD16",
                            "cuMemsetD32", "cuMemsetD2D"})
        if (starts(name, p)) t[i] = Writes::kDestination;
      if (name == "cuMemcpy" || name == "cuMemcpy_ptds" || name == "cuMemcpyAsync" || name == "cuMemcpyAsync_ptsz")
        t[i] = Writes::kDestination;
    }
    return t;
  }();
  return table[op];
}

// The driver call a kOpMappedCopy names, with the server copy's address for the host side.
CUresult run_copy(const DriverTable& drv, uint16_t op, CUdeviceptr dev, void* host, size_t n, CUstream s, bool* to_host) {
  const char* name = op::name(op);
  if (!name) return CUDA_ERROR_INVALID_VALUE;
  std::string_view v(name);
  const bool ptd = v.ends_with("_ptds") || v.ends_with("_ptsz");
  auto pick = [&](auto plain, auto per_thread) { return ptd ? per_thread : plain; };
  *to_host = v.starts_with("cuMemcpyDtoH");
  CUresult (*htod)(CUdeviceptr, const void*, size_t) = nullptr;
  CUresult (*dtoh)(void*, CUdeviceptr, size_t) = nullptr;
  CUresult (*htod_async)(CUdeviceptr, const void*, size_t, CUstream) = nullptr;
  CUresult (*dtoh_async)(void*, CUdeviceptr, size_t, CUstream) = nullptr;
  if (v.starts_with("cuMemcpyHtoDAsync")) htod_async = pick(drv.cuMemcpyHtoDAsync_v2, drv.cuMemcpyHtoDAsync_v2_ptsz);
  else if (v.starts_with("cuMemcpyHtoD")) htod = pick(drv.cuMemcpyHtoD_v2, drv.cuMemcpyHtoD_v2_ptds);
  else if (v.starts_with("cuMemcpyDtoHAsync")) dtoh_async = pick(drv.cuMemcpyDtoHAsync_v2, drv.cuMemcpyDtoHAsync_v2_ptsz);
  else if (v.starts_with("cuMemcpyDtoH")) dtoh = pick(drv.cuMemcpyDtoH_v2, drv.cuMemcpyDtoH_v2_ptds);
  else return CUDA_ERROR_INVALID_VALUE;
  if (htod) return htod(dev, host, n);
  if (dtoh) return dtoh(host, dev, n);
  if (htod_async) return htod_async(dev, host, n, s);
  if (dtoh_async) return dtoh_async(host, dev, n, s);
  return CUDA_ERROR_NOT_SUPPORTED;
}

}  // namespace

void MappedMemory::alloc(const DriverTable& drv, Reader& in, Writer& out) {
  proto::wire::MappedAlloc req;
  proto::wire::read_mapped_alloc(in, &req);
  const uint64_t base = req.address, size = req.size;
  const uint32_t flags = req.flags;
  if (!in.ok()) return;
  (void)flags;
  if (size == 0 || size > kMaxMapped || base % kPage) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!drv.cuMemHostRegister_v2 || !drv.cuMemHostGetDevicePointer_v2 || !drv.cuMemHostUnregister)
    return out.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  {
    std::lock_guard lk(mu_);
    if (by_client_.count(base)) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  }
  size_t len = (size + kPage - 1) / kPage * kPage;
  // The server copy and the shadow: up to twice the size in this server's memory, capped.
  Held held(len + size, "mapped host memory (cuMemHostAlloc)");
  if (!held.ok()) return out.put<int32_t>(CUDA_ERROR_OUT_OF_MEMORY);
  // The client's address first: then the device pointer equals the host pointer on both ends.
  void* p = mmap(reinterpret_cast<void*>(base), len, PROT_READ | PROT_WRITE,
                 MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != MAP_FAILED && reinterpret_cast<uint64_t>(p) != base) {
    munmap(p, len);  // an old kernel that took the address as a hint only
    p = MAP_FAILED;
  }
  if (p == MAP_FAILED) p = mmap(nullptr, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED) return out.put<int32_t>(CUDA_ERROR_OUT_OF_MEMORY);
  CUresult rc = drv.cuMemHostRegister_v2(p, len, CU_MEMHOSTREGISTER_DEVICEMAP | CU_MEMHOSTREGISTER_PORTABLE);
  CUdeviceptr dptr = 0;
  if (rc == CUDA_SUCCESS) rc = drv.cuMemHostGetDevicePointer_v2(&dptr, p, 0);
  if (rc != CUDA_SUCCESS) {
    drv.cuMemHostUnregister(p);
    munmap(p, len);
    return out.put<int32_t>(rc);
  }
  if (CUresult added = add(base, static_cast<uint8_t*>(p), dptr, size, false, held.bytes())) {
    drv.cuMemHostUnregister(p);
    munmap(p, len);
    return out.put<int32_t>(added);
  }
  held.keep();
  if (reinterpret_cast<uint64_t>(p) != base)
    log::debug("mapped host memory: %llu bytes at %p here for the client's 0x%llx (address taken here)",
               static_cast<unsigned long long>(size), p, static_cast<unsigned long long>(base));
  out.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_mapped_alloc_reply(out, {dptr, reinterpret_cast<uint64_t>(p)});
}

void MappedMemory::managed_alloc(const DriverTable& drv, Reader& in, Writer& out) {
  proto::wire::ManagedAlloc req;
  proto::wire::read_managed_alloc(in, &req);
  const uint64_t size = req.size;
  const uint32_t flags = req.flags;
  if (!in.ok()) return;
  if (size == 0 || size > kMaxMapped) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  if (!drv.cuMemAllocManaged || !drv.cuMemFree_v2) return out.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  // The client maps its copy at the same address page by page, so no two managed allocations may
  // share a page: the driver packs small ones together (UnifiedMemoryStreams got an unaligned
  // address and failed on the H200), so each is asked for whole 2 MiB granules, which it places
  // on their own pages. Only `size` bytes are mirrored.
  constexpr uint64_t kGranule = 2u << 20;
  const uint64_t asked = (size + kGranule - 1) / kGranule * kGranule;
  Held held(size, "managed memory's mirror (cuMemAllocManaged)");  // the shadow; the rest is the GPU's
  if (!held.ok()) return out.put<int32_t>(CUDA_ERROR_OUT_OF_MEMORY);
  CUdeviceptr p = 0;
  CUresult rc = drv.cuMemAllocManaged(&p, asked, flags);
  if (rc != CUDA_SUCCESS) return out.put<int32_t>(rc);
  if (p % 4096) {
    log::error("cuMemAllocManaged: the driver placed %llu bytes at 0x%llx, not on a page boundary; rgpu mirrors "
               "managed memory by pages and refuses it (CUDA_ERROR_NOT_SUPPORTED)",
               static_cast<unsigned long long>(asked), static_cast<unsigned long long>(p));
    drv.cuMemFree_v2(p);
    return out.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  }
  // Managed memory reads as zero until written (the driver hands out fresh pages, as the kernel
  // does; fakecuda zeroes), like a fresh mapping.
  if (CUresult added = add(p, reinterpret_cast<uint8_t*>(p), p, size, true, held.bytes())) {
    drv.cuMemFree_v2(p);
    // INVALID_VALUE: the driver reused an address still recorded (a free went by some other path).
    return out.put<int32_t>(added == CUDA_ERROR_INVALID_VALUE ? CUDA_ERROR_UNKNOWN : added);
  }
  held.keep();
  out.put<int32_t>(CUDA_SUCCESS);
  proto::wire::put_managed_alloc_reply(out, p);
}

bool MappedMemory::forget_managed(uint64_t address, const SendUpdate& send) {
  {
    std::lock_guard lk(mu_);
    auto it = by_client_.find(address);
    if (it == by_client_.end() || !it->second.managed) return true;
    limits::unreserve_host(it->second.host_bytes);
    by_client_.erase(it);
    count_.fetch_sub(1, std::memory_order_relaxed);
  }
  std::vector<uint8_t> payload;
  Writer w(&payload);
  proto::wire::put_mapped_bytes(w, address, proto::wire::kManagedFreed, nullptr, 0);
  return send(payload);
}

void MappedMemory::free(const DriverTable& drv, Reader& in, Writer& out) {
  uint64_t base = 0;
  if (!proto::wire::read_mapped_free(in, &base)) return;
  Buffer b;
  {
    std::lock_guard lk(mu_);
    auto it = by_client_.find(base);
    if (it == by_client_.end()) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    b = std::move(it->second);
    by_client_.erase(it);
    limits::unreserve_host(b.host_bytes);
    count_.fetch_sub(1, std::memory_order_relaxed);
  }
  if (b.managed) return out.put<int32_t>(drv.cuMemFree_v2(b.dptr));
  size_t len = (b.size + kPage - 1) / kPage * kPage;
  CUresult rc = drv.cuMemHostUnregister ? drv.cuMemHostUnregister(b.data) : CUDA_ERROR_NOT_SUPPORTED;
  munmap(b.data, len);
  out.put<int32_t>(rc);
}

void MappedMemory::write(Reader& in, Writer& out) {
  proto::wire::MappedBytes req;
  if (!proto::wire::read_mapped_bytes(in, &req)) return;
  const uint64_t base = req.address, offset = req.offset;
  const size_t n = req.n;
  const uint8_t* bytes = req.bytes;
  std::lock_guard lk(mu_);
  auto it = by_client_.find(base);
  if (it == by_client_.end() || offset > it->second.size || n > it->second.size - offset)
    return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
  std::memcpy(it->second.data + offset, bytes, n);
  std::memcpy(it->second.shadow.data() + offset, bytes, n);
  out.put<int32_t>(CUDA_SUCCESS);
}

CUresult MappedMemory::add(uint64_t client_base, uint8_t* data, CUdeviceptr dptr, size_t size, bool managed,
                           uint64_t host_bytes) {
  Buffer b;
  b.host_bytes = host_bytes;
  b.client_base = client_base;
  b.data = data;
  b.dptr = dptr;
  b.size = size;
  try {
    b.shadow.assign(size, 0);
  } catch (const std::bad_alloc&) {
    return CUDA_ERROR_OUT_OF_MEMORY;  // the session goes on; the client's call fails
  }
  b.managed = managed;
  std::lock_guard lk(mu_);
  // No overlap with a buffer that starts before it, at it, or inside it.
  auto next = by_client_.lower_bound(client_base);
  if (find_locked(client_base, 1) || (next != by_client_.end() && next->first - client_base < size))
    return CUDA_ERROR_INVALID_VALUE;
  by_client_[client_base] = std::move(b);
  count_.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

MappedMemory::Buffer* MappedMemory::find_locked(uint64_t client_address, uint64_t n) {
  auto it = by_client_.upper_bound(client_address);
  if (it == by_client_.begin()) return nullptr;
  Buffer& b = (--it)->second;
  uint64_t off = client_address - b.client_base;
  return off < b.size && n <= b.size - off ? &b : nullptr;
}

void MappedMemory::mark_locked(Buffer& b, size_t offset, size_t len) {
  b.marked_at = generation_.fetch_add(1, std::memory_order_relaxed) + 1;
  if (b.gpu_all) return;
  size_t end = offset + len;
  // Merge with every marked range that overlaps or touches [offset, end).
  auto it = b.gpu_ranges.upper_bound(offset);
  if (it != b.gpu_ranges.begin() && std::prev(it)->second >= offset) --it;
  while (it != b.gpu_ranges.end() && it->first <= end) {
    offset = std::min(offset, it->first);
    end = std::max(end, it->second);
    it = b.gpu_ranges.erase(it);
  }
  b.gpu_ranges[offset] = end;
  if (b.gpu_ranges.size() > kMaxRanges) {
    b.gpu_all = true;
    b.gpu_ranges.clear();
  }
}

void MappedMemory::note_gpu_work(uint16_t op, const uint8_t* args, size_t n) {
  Writes w = classify(op);
  if (w == Writes::kNothing) return;
  uint64_t dst = 0;
  if (w == Writes::kDestination) {
    if (n < sizeof dst) return;  // malformed: the handler will say so
    std::memcpy(&dst, args, sizeof dst);
  }
  std::lock_guard lk(mu_);
  for (auto& [base, b] : by_client_) {
    // A destination inside a buffer marks it whole: the length's encoding differs by call.
    if (w == Writes::kAnything || dst - b.dptr < b.size) {
      mark_locked(b, 0, b.size);
      b.gpu_all = true;
      b.gpu_ranges.clear();
    }
  }
}

void MappedMemory::copy(const DriverTable& drv, HandleMap& handles, Reader& in, Writer& out) {
  proto::wire::MappedCopy req;
  if (!proto::wire::read_mapped_copy(in, &req)) return;
  const uint16_t op = req.op;
  const uint64_t dev = req.device, stream_id = req.stream, host = req.host, n = req.n;
  CUstream stream = nullptr;
  if (!handles.get(stream_id, &stream)) return out.put<int32_t>(CUDA_ERROR_INVALID_HANDLE);
  uint8_t* here;
  {
    std::lock_guard lk(mu_);
    Buffer* b = find_locked(host, n);
    if (!b) return out.put<int32_t>(CUDA_ERROR_INVALID_VALUE);
    here = b->data + (host - b->client_base);
  }
  // The driver call runs outside the lock: a synchronous copy may wait on the GPU, and the
  // reading side (send_updates) must not wait behind it. The program frees a buffer under a
  // copy in flight only by a bug of its own, as with a local driver.
  bool to_host = false;
  CUresult rc = run_copy(drv, op, dev, here, n, stream, &to_host);
  if (rc == CUDA_SUCCESS && to_host && n) {
    std::lock_guard lk(mu_);
    if (Buffer* b = find_locked(host, n)) mark_locked(*b, host - b->client_base, n);
  }
  out.put<int32_t>(rc);
}

bool MappedMemory::send_updates(const SendUpdate& send, const uint64_t* finished_up_to) {
  if (empty()) return true;
  std::lock_guard lk(mu_);
  std::vector<uint8_t> payload;
  for (auto& [base, b] : by_client_) {
    auto send_changed = [&, &b = b, base = base](size_t from, size_t to) {  // clang 14 cannot capture bindings
      from = from / kPage * kPage;
      to = std::min(b.size, (to + kPage - 1) / kPage * kPage);
      return for_each_changed_run(b.data + from, b.shadow.data() + from, to - from, kPage, kMaxUpdate,
                                  [&](size_t at, size_t n) {
                                    at += from;
                                    payload.clear();
                                    Writer w(&payload);
                                    proto::wire::put_mapped_bytes(w, base, at, b.data + at, n);
                                    // The shadow takes what was sent: the GPU may be changing the
                                    // buffer meanwhile.
                                    std::memcpy(b.shadow.data() + at, payload.data() + 16, n);
                                    return send(payload);
                                  });
    };
    bool sent = true;
    if (b.gpu_all) {
      sent = send_changed(0, b.size);
    } else {
      for (auto [from, to] : b.gpu_ranges)
        if (!(sent = send_changed(from, to))) break;
    }
    if (!sent) return false;
    if (finished_up_to && b.marked_at <= *finished_up_to) {
      b.gpu_all = false;
      b.gpu_ranges.clear();
    }
  }
  return true;
}

}  // namespace rgpu::server
