// NVRTC_CACHE (da9151d3…, 7 words; once thought a compiler) is NVRTC's cache: libnvrtc 13.0 keeps what it compiles
// in the driver's compute cache through this table. Its own log strings say so ("[nvrtc cache]
// failed to get cuda export table. Disable nvrtc cache."); the calls below were read from
// libnvrtc.so.13 (its cache reader and writer) and agree with the arguments traced on the H200
// (docs/reference/cuda13-observed/export-table-slot-calls.txt, workload torch_sdpa):
//
//   slot 1  CUresult open(void **entry, int kind, const void *input, uint32_t input_len,
//                         const char *options, const char *host, const char *build, int a, int b)
//           an entry for one compile: its NVVM input (bitcode), options (" -arch=compute_90a
//           -ftz=1 ..."), "HOST64", the compiler's build date and two ints of the compile
//   slot 2  CUresult close(void *entry)
//   slot 3  CUresult read(void *entry, int zero, void **data, uint32_t *size)
//           0 and the entry's output (PTX) on a hit; CUDA_ERROR_NOT_FOUND on a miss, as the driver
//   slot 4  CUresult write(void *entry, int zero, const void *data, size_t size)   (after a miss)
//   slot 6  CUresult free(void *data)   what slot 3 handed out
//   slot 5  never seen called: a stub
//
// Why it matters: a cache that always misses makes NVRTC compile again in every process. PyTorch's
// attention through cuDNN compiles kernels with NVRTC on its first forward and backward; on the
// H200, making slot 1 fail under the real driver slowed the small training model's first step by
// 0.5 to 0.7 s, the gap rgpu's first step had to a local one (bench/README.md).
//
// rgpu keeps this cache on the client, in files (default ~/.cache/rgpu/nvrtc/, RGPU_NVRTC_CACHE
// to move it, `none` for none; CUDA_CACHE_DISABLE=1 turns it off as it does the driver's): no round
// trip, and PTX does not depend on the GPU, only on what the key holds. A file is named by the
// SHA-256 of everything open() received and holds its output after a header with the output's own
// SHA-256, so a damaged or cut-short file is a miss (and removed), never wrong PTX. At 512 MiB the
// least recently used entries make room for new ones (a hit marks its entry used, as the driver's
// own cache does).
#include <cuda.h>
#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "client/dark_api/dark_api.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/files.h"
#include "common/log.h"
#include "common/net.h"

namespace rgpu::client::dark {
namespace {

constexpr char kMagic[8] = {'R', 'G', 'P', 'U', 'N', 'V', 'C', '1'};
constexpr size_t kHeader = sizeof kMagic + sizeof(uint64_t) + sizeof(crypto::Digest);
constexpr size_t kMaxEntryBytes = 64u << 20;   // one compile's PTX; larger outputs are not kept
// The whole directory. A write that would pass it first removes the least recently used entries
// (a hit marks its entry used) until the cache is at three quarters of it.
std::atomic<uint64_t> g_max_cache_bytes{512u << 20};

std::atomic<uint64_t> g_hits{0}, g_misses{0}, g_writes{0};

struct Entry {
  std::string path;  // "" when the cache is off
};

// The cache directory, or "" when off. Read per call: cheap, and tests change the environment.
std::string directory() {
  if (env::get().cuda_cache_disable) return "";
  const std::string& setting = env::get().nvrtc_cache;
  if (setting == "none" || setting == "0") return "";
  return setting.empty() ? files::cache_path("nvrtc") : setting;
}

void put_bytes(std::string* key, const void* p, size_t n) { key->append(static_cast<const char*>(p), n); }
void put_str(std::string* key, const char* s) {
  if (s) key->append(s);
  key->push_back('\0');
}

CUresult cache_open(void** entry, int kind, const void* input, uint32_t input_len, const char* options,
                    const char* host, const char* build, int a, int b) {
  if (!entry || (!input && input_len)) return CUDA_ERROR_INVALID_VALUE;
  std::string dir = directory();
  auto* e = new Entry();
  if (!dir.empty()) {
    std::string key = "rgpu-nvrtc-cache-1";
    key.push_back('\0');
    for (int32_t v : {kind, a, b, static_cast<int32_t>(input_len)}) put_bytes(&key, &v, sizeof v);
    put_bytes(&key, input, input_len);
    put_str(&key, options);
    put_str(&key, host);
    put_str(&key, build);
    crypto::Digest d = crypto::sha256(key.data(), key.size());
    e->path = dir + "/" + crypto::hex(d.data(), d.size());
  }
  *entry = e;
  return CUDA_SUCCESS;
}

CUresult cache_close(void* entry) {
  delete static_cast<Entry*>(entry);
  return CUDA_SUCCESS;
}

CUresult cache_read(void* entry, int /*zero*/, void** data, uint32_t* size) {
  auto* e = static_cast<Entry*>(entry);
  if (!e || !data || !size) return CUDA_ERROR_INVALID_VALUE;
  if (e->path.empty()) return CUDA_ERROR_NOT_FOUND;
  int fd = open(e->path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    g_misses.fetch_add(1, std::memory_order_relaxed);
    log::debug("nvrtc cache: miss %s", e->path.c_str());
    return CUDA_ERROR_NOT_FOUND;
  }
  char header[kHeader];
  uint64_t n = 0;
  crypto::Digest want{};
  void* out = nullptr;
  bool ok = net::read_full(fd, header, sizeof header) == static_cast<ssize_t>(sizeof header) && std::memcmp(header, kMagic, sizeof kMagic) == 0;
  if (ok) {
    std::memcpy(&n, header + sizeof kMagic, sizeof n);
    std::memcpy(want.data(), header + sizeof kMagic + sizeof n, want.size());
    ok = n > 0 && n <= kMaxEntryBytes && (out = std::malloc(n)) != nullptr &&
         net::read_full(fd, out, n) == static_cast<ssize_t>(n);
    char extra;
    ok = ok && ::read(fd, &extra, 1) == 0 && crypto::sha256(out, n) == want;
  }
  close(fd);
  if (!ok) {
    std::free(out);
    log::warn("nvrtc cache: %s is damaged; removing it (NVRTC compiles again)", e->path.c_str());
    unlink(e->path.c_str());
    g_misses.fetch_add(1, std::memory_order_relaxed);
    return CUDA_ERROR_NOT_FOUND;
  }
  g_hits.fetch_add(1, std::memory_order_relaxed);
  utimensat(AT_FDCWD, e->path.c_str(), nullptr, 0);  // used now: the last to go when the cache is full
  log::debug("nvrtc cache: hit %s (%llu bytes)", e->path.c_str(), static_cast<unsigned long long>(n));
  *data = out;
  *size = static_cast<uint32_t>(n);
  return CUDA_SUCCESS;
}

// Makes room for `incoming` bytes: when the directory's files and it would pass the limit, removes
// entries, least recently used first, down to three quarters of the limit. False when there is
// still no room (a single output bigger than that).
bool make_room(const std::string& dir, uint64_t incoming) {
  struct File {
    timespec used;
    uint64_t bytes;
    std::string name;
  };
  std::vector<File> files;
  uint64_t total = 0;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* ent = readdir(d)) {
      struct stat st;
      if (fstatat(dirfd(d), ent->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
      files.push_back({st.st_mtim, static_cast<uint64_t>(st.st_size), ent->d_name});
      total += static_cast<uint64_t>(st.st_size);
    }
    closedir(d);
  }
  const uint64_t limit = g_max_cache_bytes.load(std::memory_order_relaxed);
  if (total + incoming <= limit) return true;
  std::sort(files.begin(), files.end(), [](const File& a, const File& b) {
    return a.used.tv_sec != b.used.tv_sec ? a.used.tv_sec < b.used.tv_sec : a.used.tv_nsec < b.used.tv_nsec;
  });
  for (const File& f : files) {
    if (total + incoming <= limit / 4 * 3) break;
    if (unlinkat(AT_FDCWD, (dir + "/" + f.name).c_str(), 0) == 0) total -= f.bytes;
  }
  log::debug("nvrtc cache: %s was full (limit %llu MiB); removed the least recently used entries", dir.c_str(),
             static_cast<unsigned long long>(limit >> 20));
  return total + incoming <= limit;
}

CUresult cache_write(void* entry, int /*zero*/, const void* data, size_t size) {
  auto* e = static_cast<Entry*>(entry);
  if (!e || (!data && size)) return CUDA_ERROR_INVALID_VALUE;
  if (e->path.empty() || size == 0 || size > kMaxEntryBytes) return CUDA_SUCCESS;  // not kept
  std::string dir = e->path.substr(0, e->path.rfind('/'));
  if (!files::make_dirs(dir)) {
    log::debug("nvrtc cache: cannot create %s: %s", dir.c_str(), std::strerror(errno));
    return CUDA_SUCCESS;
  }
  if (!make_room(dir, kHeader + size)) return CUDA_SUCCESS;
  char header[kHeader];
  uint64_t n = size;
  crypto::Digest d = crypto::sha256(data, size);
  std::memcpy(header, kMagic, sizeof kMagic);
  std::memcpy(header + sizeof kMagic, &n, sizeof n);
  std::memcpy(header + sizeof kMagic + sizeof n, d.data(), d.size());
  static std::atomic<uint64_t> writes_begun{0};  // two threads writing one entry get two files
  std::string tmp = e->path + ".tmp." + std::to_string(getpid()) + "." + std::to_string(writes_begun++);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  bool ok = fd >= 0 && files::write_all(fd, header, sizeof header) && files::write_all(fd, data, size);
  if (fd >= 0) ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), e->path.c_str()) != 0) {
    log::debug("nvrtc cache: cannot write %s: %s", e->path.c_str(), std::strerror(errno));
    unlink(tmp.c_str());
    return CUDA_SUCCESS;
  }
  g_writes.fetch_add(1, std::memory_order_relaxed);
  return CUDA_SUCCESS;
}

CUresult cache_free(void* data) {
  std::free(data);
  return CUDA_SUCCESS;
}

}  // namespace

void set_nvrtc_cache_limit(uint64_t bytes) { g_max_cache_bytes.store(bytes, std::memory_order_relaxed); }

NvrtcCacheCounts nvrtc_cache_counts() {
  return {g_hits.load(std::memory_order_relaxed), g_misses.load(std::memory_order_relaxed),
          g_writes.load(std::memory_order_relaxed)};
}

const void* nvrtc_cache_table() {
  static const auto table = [] {
    auto t = stub_table<TableId::kNvrtcCache, 7>(true);
    t[1] = slot_fn(&cache_open);
    t[2] = slot_fn(&cache_close);
    t[3] = slot_fn(&cache_read);
    t[4] = slot_fn(&cache_write);
    t[6] = slot_fn(&cache_free);
    return t;
  }();
  return table.data();
}

}  // namespace rgpu::client::dark
