// Implementation of server/module_cache.h.
#include "server/module_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>
#include <tuple>

#include "common/cuda_image.h"
#include "common/env.h"
#include "common/files.h"
#include "common/log.h"

namespace rgpu::server::module_cache {
namespace {

std::string g_root;  // --cache-dir ("" = off)
std::string g_dir;   // this session's tenant's directory in it
uint64_t g_max_bytes = 0;
// Bytes held by the cached images of every tenant, kept in memory shared by the server's processes
// (mapped by configure(), before the listener forks): a store does not rescan the directory. The
// eviction's scan sets it right again (files removed behind the server's back, races).
std::atomic<uint64_t>* g_total = nullptr;

// The modification time the server gives every image it wrote or verified (module_cache.h,
// "Verified images"): anything else touching the file gives it another time.
constexpr timespec kVerifiedStamp = {946684800, 123456789};  // 2000-01-01 00:00:00.123456789 UTC

bool stamped(const struct stat& st) {
  return st.st_mtim.tv_sec == kVerifiedStamp.tv_sec && st.st_mtim.tv_nsec == kVerifiedStamp.tv_nsec;
}

// The access time is the image's last use (for the eviction), set by hand: mounts with noatime or
// relatime would not keep it. The modification time stays the stamp.
void stamp(int dirfd_or_cwd, const char* path) {
  const timespec times[2] = {{0, UTIME_NOW}, kVerifiedStamp};
  utimensat(dirfd_or_cwd, path, times, 0);  // best effort: an unstamped image is verified again
}
void touch(const char* path) {
  const timespec times[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
  utimensat(AT_FDCWD, path, times, 0);
}

std::string tenant_dir(const std::string& tenant) { return tenant.empty() ? g_root : g_root + "/tenant-" + tenant; }

bool is_hex_name(const char* s) {
  size_t n = 0;
  for (; s[n]; ++n) {
    char c = s[n];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return n == 64;
}

struct Entry {
  timespec used;
  std::string path;
  uint64_t size;
};

// The images of every tenant's directory (files named by a hash; temporaries are not counted).
std::vector<Entry> scan_all() {
  std::vector<Entry> out;
  std::vector<std::string> dirs = {g_root};
  if (DIR* d = opendir(g_root.c_str())) {
    while (dirent* e = readdir(d))
      if (std::strncmp(e->d_name, "tenant-", 7) == 0) dirs.push_back(g_root + "/" + e->d_name);
    closedir(d);
  }
  for (const std::string& dir : dirs) {
    DIR* d = opendir(dir.c_str());
    if (!d) continue;
    while (dirent* e = readdir(d)) {
      if (!is_hex_name(e->d_name)) continue;
      struct stat st;
      if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode))
        out.push_back({st.st_atim, dir + "/" + e->d_name, static_cast<uint64_t>(st.st_size)});
    }
    closedir(d);
  }
  return out;
}

uint64_t sum(const std::vector<Entry>& all) {
  uint64_t total = 0;
  for (const Entry& e : all) total += e.size;
  return total;
}

// Makes room for `need` more bytes: removes the least recently used images (any tenant's) until
// the rest and `need` fit. The scan also sets the shared total right.
void evict_for(uint64_t need) {
  std::vector<Entry> all = scan_all();
  uint64_t total = sum(all);
  std::sort(all.begin(), all.end(), [](const Entry& a, const Entry& b) {
    return std::tie(a.used.tv_sec, a.used.tv_nsec) < std::tie(b.used.tv_sec, b.used.tv_nsec);
  });
  size_t evicted = 0;
  for (const Entry& e : all) {
    if (total + need <= g_max_bytes) break;
    if (unlink(e.path.c_str()) == 0) ++evicted;  // another process may have removed it first
    total -= e.size;
  }
  g_total->store(total);
  log::debug("module cache: removed %zu least recently used image%s to make room for %llu bytes (limit %llu)",
             evicted, evicted == 1 ? "" : "s", static_cast<unsigned long long>(need),
             static_cast<unsigned long long>(g_max_bytes));
}

void subtract(uint64_t n) {
  uint64_t cur = g_total->load();
  while (!g_total->compare_exchange_weak(cur, cur - std::min(cur, n))) {
  }
}

}  // namespace

std::string hex(const crypto::Digest& d) { return crypto::hex(d.data(), d.size()); }

std::string default_dir() {
  const env::Settings& s = env::get();
  if (!s.xdg_cache_home.empty()) return s.xdg_cache_home + "/rgpu";
  if (!s.home.empty()) return s.home + "/.cache/rgpu/modules";
  return "";
}

bool configure(const std::string& dir, uint64_t max_bytes, std::string* err) {
  g_dir.clear();
  g_root.clear();
  if (dir.empty()) return true;
  if (!files::make_dirs(dir)) {
    *err = "cannot create the module cache directory " + dir + ": " + std::strerror(errno);
    return false;
  }
  if (!g_total) {
    void* p = mmap(nullptr, sizeof *g_total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    g_total = p == MAP_FAILED ? new std::atomic<uint64_t>(0) : new (p) std::atomic<uint64_t>(0);
  }
  g_root = g_dir = dir;
  g_max_bytes = max_bytes;
  g_total->store(sum(scan_all()));
  return true;
}

void set_tenant(const std::string& tenant) {
  if (g_root.empty()) return;
  g_dir = tenant_dir(tenant);
  if (!files::make_dirs(g_dir)) {
    log::warn("cannot create the module cache directory %s (%s); this session runs without a module cache",
              g_dir.c_str(), std::strerror(errno));
    g_dir.clear();
  }
}

uint64_t total_bytes() { return g_total && !g_root.empty() ? g_total->load() : 0; }

bool enabled() { return !g_dir.empty(); }

bool load(const crypto::Digest& hash, std::vector<uint8_t>* out) {
  if (g_dir.empty()) return false;
  std::string path = g_dir + "/" + hex(hash);
  int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return false;
  struct stat st;
  bool ok = fstat(fd, &st) == 0 && S_ISREG(st.st_mode) && st.st_size > 0 &&
            static_cast<uint64_t>(st.st_size) <= g_max_bytes;
  if (ok) {
    out->resize(static_cast<size_t>(st.st_size));
    size_t got = 0;
    while (got < out->size()) {
      ssize_t r = ::read(fd, out->data() + got, out->size() - got);
      if (r < 0 && errno == EINTR) continue;
      if (r <= 0) break;
      got += static_cast<size_t>(r);
    }
    ok = got == out->size();
  }
  close(fd);
  if (ok && crypto::sha256(out->data(), out->size()) != hash) {
    log::warn("module cache: %s does not match its hash; removing it", path.c_str());
    if (unlink(path.c_str()) == 0) subtract(static_cast<uint64_t>(st.st_size));
    ok = false;
  }
  if (ok) stamped(st) ? touch(path.c_str()) : stamp(AT_FDCWD, path.c_str());
  if (!ok) out->clear();
  return ok;
}

void store(const void* data, size_t received) {
  if (g_dir.empty() || received == 0) return;
  // Only the image: bytes a client sent past its end are not part of it (and would let one
  // client fill the cache with junk under hashes no load ever asks for).
  const size_t n = image::image_size(data, received);
  if (n == 0 || n > g_max_bytes) {
    log::debug("module cache: not caching %zu bytes: %s", received,
               n == 0 ? "not a cubin, fatbin or PTX whose length rgpu can measure" : "larger than the whole cache");
    return;
  }
  std::string path = g_dir + "/" + hex(crypto::sha256(data, n));
  if (access(path.c_str(), F_OK) == 0) {
    touch(path.c_str());
    return;
  }
  if (g_total->load() + n > g_max_bytes) evict_for(n);
  uint8_t nonce[8];
  crypto::random_bytes(nonce, sizeof nonce);
  crypto::Digest pad{};
  std::memcpy(pad.data(), nonce, sizeof nonce);
  std::string tmp = path + ".tmp." + hex(pad).substr(0, 16);
  int fd = open(tmp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
  if (fd < 0) {
    log::debug("module cache: cannot create %s: %s", tmp.c_str(), std::strerror(errno));
    return;
  }
  // No fsync: an image cut short by a crash fails its hash check on load and is removed.
  bool ok = files::write_all(fd, data, n);
  const timespec times[2] = {{0, UTIME_NOW}, kVerifiedStamp};
  ok = ok && futimens(fd, times) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    log::debug("module cache: cannot write %s: %s", path.c_str(), std::strerror(errno));
    unlink(tmp.c_str());
    return;
  }
  g_total->fetch_add(n);
}

std::vector<crypto::Digest> index(size_t max) {
  std::vector<crypto::Digest> out;
  if (g_dir.empty()) return out;
  DIR* d = opendir(g_dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    if (out.size() >= max) break;
    std::string name = e->d_name;
    if (!is_hex_name(name.c_str())) continue;
    crypto::Digest h{};
    for (size_t i = 0; i < h.size(); ++i) h[i] = static_cast<uint8_t>(std::stoul(name.substr(2 * i, 2), nullptr, 16));
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) != 0 || !S_ISREG(st.st_mode)) continue;
    // Changed since the server last wrote or checked it: check it now (load() removes a damaged
    // image and stamps a sound one), since clients load listed images without waiting.
    if (!stamped(st)) {
      std::vector<uint8_t> bytes;
      if (!load(h, &bytes)) continue;
    }
    out.push_back(h);
  }
  closedir(d);
  return out;
}

}  // namespace rgpu::server::module_cache
