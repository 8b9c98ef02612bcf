// Implementation of client/mapped_memory.h.
//
// Finding the program's writes. Comparing each mapped buffer with a shadow at every push costs
// time in proportion to the buffer at every launch and copy (NVIDIA's simpleStreams, with a
// 64 MiB buffer and a few thousand calls, did not finish in 30 s). The kernel can track writes
// instead. Candidates:
//  - mprotect the buffer read-only after each push and catch the first write to each page in a
//    SIGSEGV handler. Rejected: a write by the kernel on the program's behalf (read(2) into the
//    buffer, recv, a driver's ioctl) raises no signal but fails with EFAULT, so a program that
//    reads a file into pinned memory (common) would break; and the handler must stay first
//    in line although runtimes (JVM, Python's faulthandler, sanitizers) install their own.
//  - soft-dirty bits (/proc/self/clear_refs): clearing is per process, so it would fault every
//    page the program owns after each push, and it collides with anyone else using them.
//  - userfaultfd write-protect in asynchronous mode (UFFD_FEATURE_WP_ASYNC, Linux 6.7) with the
//    PAGEMAP_SCAN ioctl: the kernel resolves the write fault itself (no signal, no thread, no
//    EFAULT: writes from system calls are tracked like any other), marks the page written, and
//    one ioctl reports the written pages of a range and write-protects them again. Chosen.
//    UFFD_USER_MODE_ONLY needs no privilege; asynchronous faults are resolved before that mode
//    is consulted, so kernel-mode writes are tracked all the same.
// Where the kernel lacks it (older kernels, a seccomp filter that refuses userfaultfd, memory a
// userfaultfd cannot cover such as a file mapping), the range falls back to the shadow, once
// logged. Known limits of tracking: a page the GPU's update and a program thread write at the
// same moment may lose the program's write (as with the shadow: both work in whole pages).
#include "client/mapped_memory.h"

#include <fcntl.h>
#include <linux/userfaultfd.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <map>
#include <mutex>
#include <vector>

#include "client/call.h"
#include "client/runtime.h"
#include "common/log.h"
#include "common/page_diff.h"
#include "common/wire.h"
#include "protocol/messages.h"
#include "protocol/op_classes.h"
#include "protocol/wire/mapped.h"

namespace rgpu::client::mapped {
namespace {

constexpr size_t kPage = 4096;
// Largest kOpMappedWrite payload; longer runs of changed pages go in several.
constexpr size_t kMaxWrite = 4u << 20;

// Kernel ABI of Linux 6.7 (include/uapi/linux/fs.h, userfaultfd.h), spelled out for older headers.
struct PageRegion {
  uint64_t start, end, categories;
};
struct PmScanArg {
  uint64_t size, flags, start, end, walk_end, vec, vec_len, max_pages, category_inverted, category_mask,
      category_anyof_mask, return_mask;
};
constexpr unsigned long kPagemapScan = _IOWR('f', 16, PmScanArg);
constexpr uint64_t kScanWpMatching = 1 << 0, kScanCheckWpAsync = 1 << 1;
constexpr uint64_t kPageIsWritten = 1 << 1;
constexpr uint64_t kFeatureWpHugetlbfsShmem = 1 << 12, kFeatureWpUnpopulated = 1 << 13,
                   kFeatureWpAsync = 1 << 15;
constexpr int kUserModeOnly = 1;  // UFFD_USER_MODE_ONLY

// The process's userfaultfd in asynchronous write-protect mode, and /proc/self/pagemap to scan.
class WriteTracker {
 public:
  // The tracker, or null (logged once) when this kernel cannot track writes.
  static WriteTracker* get() {
    static WriteTracker* t = open();
    return t;
  }

  // Starts tracking [p, p + n) (page-aligned): false when this memory cannot be tracked.
  bool track(uint8_t* p, size_t n) {
    uffdio_register r{};
    r.range.start = reinterpret_cast<uintptr_t>(p);
    r.range.len = n;
    r.mode = UFFDIO_REGISTER_MODE_WP;
    if (ioctl(uffd_, UFFDIO_REGISTER, &r) != 0) {
      log::debug("mapped host memory at %p: no write tracking (UFFDIO_REGISTER: %s); comparing pages instead", p,
                 std::strerror(errno));
      return false;
    }
    // Arms every page (the first scan reports them all: nothing was protected yet).
    if (!take(p, n, [](size_t, size_t) { return true; })) {
      log::debug("mapped host memory at %p: no write tracking (PAGEMAP_SCAN: %s); comparing pages instead", p,
                 std::strerror(errno));
      untrack(p, n);
      return false;
    }
    return true;
  }
  void untrack(uint8_t* p, size_t n) {
    uffdio_range r{reinterpret_cast<uintptr_t>(p), n};
    ioctl(uffd_, UFFDIO_UNREGISTER, &r);  // fails harmlessly when the program unmapped it already
  }

  // Calls fn(offset, length) for each run of pages of [p, p + n) written since the last take,
  // protecting them again first (a write after that is reported next time). False when the scan
  // fails (the range was unmapped under us).
  template <class Fn>
  bool take(uint8_t* p, size_t n, Fn fn) {
    PageRegion regions[64];
    const uint64_t start = reinterpret_cast<uintptr_t>(p), end = start + (n + kPage - 1) / kPage * kPage;
    for (uint64_t at = start; at < end;) {
      PmScanArg a{};
      a.size = sizeof a;
      a.flags = kScanWpMatching | kScanCheckWpAsync;
      a.start = at;
      a.end = end;
      a.vec = reinterpret_cast<uintptr_t>(regions);
      a.vec_len = 64;
      a.category_mask = kPageIsWritten;
      a.return_mask = kPageIsWritten;
      long got = ioctl(pagemap_, kPagemapScan, &a);
      if (got < 0) return false;
      for (long i = 0; i < got; ++i) fn(regions[i].start - start, std::min<uint64_t>(regions[i].end, end) - regions[i].start);
      if (a.walk_end <= at) return false;
      at = a.walk_end;
    }
    return true;
  }

 private:
  WriteTracker(int uffd, int pagemap) : uffd_(uffd), pagemap_(pagemap) {}

  static WriteTracker* open() {
    const char* why = nullptr;
    int err = 0;
    int uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | kUserModeOnly));
    uffdio_api api{};
    api.api = UFFD_API;
    if (uffd < 0) {
      why = "userfaultfd", err = errno;
    } else {
      // Asks for what it needs; shmem and hugetlbfs coverage where the kernel has it. A kernel
      // that lacks a requested feature refuses, so the optional one is dropped on a retry.
      api.features = kFeatureWpAsync | kFeatureWpUnpopulated | kFeatureWpHugetlbfsShmem;
      if (ioctl(uffd, UFFDIO_API, &api) != 0) {
        close(uffd);
        uffd = static_cast<int>(syscall(SYS_userfaultfd, O_CLOEXEC | O_NONBLOCK | kUserModeOnly));
        api = uffdio_api{};
        api.api = UFFD_API;
        api.features = kFeatureWpAsync | kFeatureWpUnpopulated;
        if (uffd < 0 || ioctl(uffd, UFFDIO_API, &api) != 0) why = "userfaultfd asynchronous write-protect (Linux 6.7)", err = errno;
      }
    }
    int pagemap = why ? -1 : ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
    if (!why && pagemap < 0) why = "/proc/self/pagemap", err = errno;
    if (why) {
      if (uffd >= 0) close(uffd);
      log::info("mapped host memory: this kernel cannot track writes (%s: %s); each call that can touch memory "
                "compares mapped buffers instead, in time proportional to their size",
                why, std::strerror(err));
      return nullptr;
    }
    return new WriteTracker(uffd, pagemap);  // leaked: lives as long as the process
  }

  int uffd_, pagemap_;
};

struct Range {
  uint8_t* base = nullptr;
  size_t size = 0;
  CUdeviceptr dptr = 0;
  int server = 0;               // whose copy it is: the server of the context current at map()
  bool managed = false;         // map_managed: ours to munmap when the server says it was freed
  bool tracked = false;         // WriteTracker reports the program's writes; no shadow
  bool fresh = false;           // tracked, and the server has not seen the initial contents yet
  bool scan_failed = false;     // tracked, and the last scan failed (logged once)
  std::vector<uint8_t> shadow;  // untracked: what the server's copy last held
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

size_t page_span(size_t n) { return (n + kPage - 1) / kPage * kPage; }

// Records [base, base + size) as mirrored by the buffer of `server` at device pointer d.
void add_range(void* base, size_t size, CUdeviceptr d, bool managed, int server) {
  Range r;
  r.base = static_cast<uint8_t*>(base);
  r.size = size;
  r.dptr = d;
  r.server = server;
  r.managed = managed;
  WriteTracker* tracker = WriteTracker::get();
  r.tracked = tracker && tracker->track(r.base, page_span(size));
  // The server's copy starts zeroed: the first push sends what differs from zero.
  r.fresh = r.tracked;
  if (!r.tracked) r.shadow.assign(size, 0);
  {
    std::lock_guard lk(mu());
    ranges()[reinterpret_cast<uintptr_t>(base)] = std::move(r);
    g_count.fetch_add(1, std::memory_order_relaxed);
  }
}

}  // namespace

std::atomic<int> g_count{0};

// kOpMappedFree of the server copy at `key` (a mapped range's host base, a managed range's
// address) on `server`: one-way.
void free_on(int server, uint64_t key) {
  Call f(proto::kOpMappedFree, kOneWay);
  f.to_server(server);
  proto::wire::put_mapped_free(f.args(), key);
  f.invoke();
}

// Several servers: records the device pointer of a new range as `server`'s, so that calls naming
// it go there (client/call.h keep_allocation); one that coincides with another server's memory
// is freed again and refused.
CUresult keep(const char* what, CUdeviceptr d, size_t size, int server, uint64_t key) {
  if (!several_servers()) return CUDA_SUCCESS;
  return keep_allocation(what, &d, size, server, [server, key](CUdeviceptr) { free_on(server, key); });
}

CUresult map(void* base, size_t size, unsigned flags, CUdeviceptr* dptr) {
  Call c(proto::kOpMappedAlloc, kWaits);
  const int server = c.server();  // the current context's: its GPU is the one that reads the copy
  if (Connection* conn = connection(server)) conn->set_mapped_update_handler(apply_update);
  proto::wire::put_mapped_alloc(c.args(), {reinterpret_cast<uintptr_t>(base), size, flags});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  proto::wire::MappedAllocReply got;  // its server address is for traces
  if (!proto::wire::read_mapped_alloc_reply(c.reply(), &got)) return CUDA_ERROR_UNKNOWN;
  const uint64_t d = got.dptr;
  if (CUresult k = keep("mapped host memory", d, size, server, reinterpret_cast<uintptr_t>(base))) return k;
  add_range(base, size, d, false, server);
  *dptr = d;
  return CUDA_SUCCESS;
}

CUresult map_managed(size_t size, unsigned flags, CUdeviceptr* dptr) {
  Call c(proto::kOpManagedAlloc, kWaits);
  const int server = c.server();
  if (Connection* conn = connection(server)) conn->set_mapped_update_handler(apply_update);
  proto::wire::put_managed_alloc(c.args(), {size, flags});
  CUresult rc = c.invoke();
  if (rc != CUDA_SUCCESS) return rc;
  uint64_t x = 0;
  if (!proto::wire::read_managed_alloc_reply(c.reply(), &x) || x == 0 || x % kPage || size > UINT64_MAX - x - kPage) {
    log::error("cuMemAllocManaged: the server's answer was malformed (address 0x%llx); returning CUDA_ERROR_UNKNOWN",
               static_cast<unsigned long long>(x));
    return CUDA_ERROR_UNKNOWN;
  }
  void* want = reinterpret_cast<void*>(static_cast<uintptr_t>(x));
  void* p = mmap(want, page_span(size), PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
  if (p != want) {
    int err = p == MAP_FAILED ? errno : EEXIST;
    if (p != MAP_FAILED) munmap(p, page_span(size));  // a kernel older than 4.17 took it as a hint
    free_on(server, x);
    trace_call("cuMemAllocManaged");
    log::error("cuMemAllocManaged is not supported here: the server's driver placed %zu bytes of managed memory at "
               "0x%llx, and this process cannot map its copy there (%s); rgpu needs the same address on both "
               "ends. Use cuMemAlloc and explicit copies",
               size, static_cast<unsigned long long>(x), std::strerror(err));
    return CUDA_ERROR_NOT_SUPPORTED;
  }
  if (CUresult k = keep("cuMemAllocManaged", x, size, server, x)) {
    munmap(p, page_span(size));
    return k;
  }
  add_range(p, size, x, true, server);
  *dptr = x;
  return CUDA_SUCCESS;
}

bool unmap(void* base) {
  int server = 0;
  {
    std::lock_guard lk(mu());
    auto it = ranges().find(reinterpret_cast<uintptr_t>(base));
    if (it == ranges().end()) return false;
    if (it->second.tracked) WriteTracker::get()->untrack(it->second.base, page_span(it->second.size));
    server = it->second.server;
    forget_allocation(it->second.dptr);
    ranges().erase(it);
    g_count.fetch_sub(1, std::memory_order_relaxed);
  }
  free_on(server, reinterpret_cast<uintptr_t>(base));
  return true;
}

bool device_pointer(const void* p, CUdeviceptr* out) {
  std::lock_guard lk(mu());
  Range* r = find_locked(reinterpret_cast<uintptr_t>(p));
  if (!r) return false;
  *out = r->dptr + (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->base));
  return true;
}

bool contains(const void* p, size_t n) {
  std::lock_guard lk(mu());
  Range* r = find_locked(reinterpret_cast<uintptr_t>(p));
  return r && n <= r->size - (reinterpret_cast<uintptr_t>(p) - reinterpret_cast<uintptr_t>(r->base));
}

bool managed_range(uintptr_t p, uintptr_t* base, size_t* size) {
  std::lock_guard lk(mu());
  Range* r = find_locked(p);
  if (!r || !r->managed) return false;
  *base = reinterpret_cast<uintptr_t>(r->base);
  *size = r->size;
  return true;
}

void push(Connection& conn, uint32_t thread_id, uint16_t op) {
  if (!op_touches_memory(op)) return;
  const bool several = several_servers();
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
      if (several && connection(r.server) != &conn) continue;  // another server's GPU reads it
      auto copy_out = [&](size_t at, size_t n) {
        runs.push_back(Run{base, at, std::vector<uint8_t>(r.base + at, r.base + at + n)});
        return true;
      };
      if (!r.tracked) {
        for_each_changed_run(r.base, r.shadow.data(), r.size, kPage, kMaxWrite, [&](size_t at, size_t n) {
          std::memcpy(r.shadow.data() + at, r.base + at, n);
          return copy_out(at, n);
        });
        continue;
      }
      if (r.fresh) {
        // Protected since map(): what the program writes from here on is tracked, and what it
        // held before goes now, less the zeros the server's copy starts with.
        r.fresh = false;
        WriteTracker::get()->take(r.base, page_span(r.size), [](size_t, size_t) { return true; });
        for_each_nonzero_run(r.base, r.size, kPage, kMaxWrite, copy_out);
        continue;
      }
      bool ok = WriteTracker::get()->take(r.base, page_span(r.size), [&](size_t at, size_t n) {
        n = std::min(n, r.size - std::min(at, r.size));  // the last page may reach past the range
        for (size_t off = 0; off < n; off += kMaxWrite) copy_out(at + off, std::min(kMaxWrite, n - off));
        return true;
      });
      if (!ok && !r.scan_failed)
        log::warn("mapped host memory at %p: its pages cannot be scanned (unmapped before cuMemHostUnregister?)",
                  static_cast<void*>(r.base));
      r.scan_failed = !ok;
    }
  }
  for (const Run& run : runs) {
    uint8_t head[proto::wire::kMappedBytesHead];
    proto::wire::put_mapped_bytes_head(head, run.base, run.offset);
    conn.send_oneway(proto::kOpMappedWrite, thread_id, head, sizeof head, run.bytes.data(), run.bytes.size());
  }
}

bool apply_update(const Connection& from, const uint8_t* payload, size_t n) {
  Reader in(payload, n);
  proto::wire::MappedBytes got;
  if (!proto::wire::read_mapped_bytes(in, &got)) return false;
  const uint64_t base = got.address, offset = got.offset;
  const size_t len = got.n;
  const uint8_t* bytes = got.bytes;
  std::lock_guard lk(mu());
  auto it = ranges().find(base);
  // A server names only its own buffers: one of another server's is that server's to change.
  if (it != ranges().end() && connection(it->second.server) != &from) return false;
  if (offset == proto::wire::kManagedFreed) {
    // The program freed a managed buffer (cuMemFree_v2): its copy here goes too.
    if (len != 0) return false;
    if (it == ranges().end() || !it->second.managed) return it == ranges().end();
    Range& r = it->second;
    if (r.tracked) WriteTracker::get()->untrack(r.base, page_span(r.size));
    munmap(r.base, page_span(r.size));
    forget_allocation(r.dptr);
    ranges().erase(it);
    g_count.fetch_sub(1, std::memory_order_relaxed);
    return true;
  }
  if (it == ranges().end()) return true;  // freed meanwhile: nothing to update
  Range& r = it->second;
  if (offset > r.size || len > r.size - offset) return false;
  std::memcpy(r.base + offset, bytes, len);
  if (!r.tracked) {
    std::memcpy(r.shadow.data() + offset, bytes, len);
  } else if (!r.fresh && len) {
    // The server holds these bytes: not the program's writes. Protect the pages again.
    size_t first = offset / kPage * kPage;
    WriteTracker::get()->take(r.base + first, page_span(offset + len - first), [](size_t, size_t) { return true; });
  }
  return true;
}

CUresult copy(uint16_t op, bool async, CUdeviceptr device, const void* host, size_t n, uint64_t stream) {
  Call c(proto::kOpMappedCopy, async ? kOneWay : kWaits);
  if (several_servers()) {
    // On the server whose copy the host side is; a device side or stream of another server makes
    // the call name two servers, which invoke() refuses saying so.
    int server = -1;
    {
      std::lock_guard lk(mu());
      if (Range* r = find_locked(reinterpret_cast<uintptr_t>(host))) server = r->server;
    }
    c.to_server(server);
    c.via_pointer(device);
    c.via(reinterpret_cast<const void*>(stream));
  }
  proto::wire::put_mapped_copy(c.args(), {op, device, stream, reinterpret_cast<uintptr_t>(host), n});
  return c.invoke();
}

}  // namespace rgpu::client::mapped
