// Implementation of server/module_cache.h.
#include "server/module_cache.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>

#include "common/env.h"
#include "common/files.h"
#include "common/log.h"

namespace rgpu::server::module_cache {
namespace {

std::string g_dir;  // "" = off
uint64_t g_max_bytes = 0;

// The modification time the server gives every image it wrote or verified (module_cache.h,
// "Verified images"): anything else touching the file gives it another time.
constexpr timespec kVerifiedStamp = {946684800, 123456789};  // 2000-01-01 00:00:00.123456789 UTC

bool stamped(const struct stat& st) {
  return st.st_mtim.tv_sec == kVerifiedStamp.tv_sec && st.st_mtim.tv_nsec == kVerifiedStamp.tv_nsec;
}

void stamp(int dirfd_or_cwd, const char* path) {
  const timespec times[2] = {kVerifiedStamp, kVerifiedStamp};
  utimensat(dirfd_or_cwd, path, times, 0);  // best effort: an unstamped image is verified again
}

bool is_hex_name(const char* s) {
  size_t n = 0;
  for (; s[n]; ++n) {
    char c = s[n];
    if (!((c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'))) return false;
  }
  return n == 64;
}

// Bytes held by cached images (files named by a hash; temporaries are not counted).
uint64_t total_bytes() {
  uint64_t total = 0;
  DIR* d = opendir(g_dir.c_str());
  if (!d) return 0;
  while (dirent* e = readdir(d)) {
    if (!is_hex_name(e->d_name)) continue;
    struct stat st;
    if (fstatat(dirfd(d), e->d_name, &st, 0) == 0 && S_ISREG(st.st_mode)) total += static_cast<uint64_t>(st.st_size);
  }
  closedir(d);
  return total;
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
  if (dir.empty()) return true;
  if (!files::make_dirs(dir)) {
    *err = "cannot create the module cache directory " + dir + ": " + std::strerror(errno);
    return false;
  }
  g_dir = dir;
  g_max_bytes = max_bytes;
  return true;
}

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
    unlink(path.c_str());
    ok = false;
  }
  if (ok && !stamped(st)) stamp(AT_FDCWD, path.c_str());
  if (!ok) out->clear();
  return ok;
}

void store(const void* data, size_t n) {
  if (g_dir.empty() || n == 0) return;
  std::string path = g_dir + "/" + hex(crypto::sha256(data, n));
  if (access(path.c_str(), F_OK) == 0) return;
  if (total_bytes() + n > g_max_bytes) {
    log::debug("module cache: not caching a %zu-byte image: the cache in %s is at its limit of %llu bytes", n,
               g_dir.c_str(), static_cast<unsigned long long>(g_max_bytes));
    return;
  }
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
  const timespec times[2] = {kVerifiedStamp, kVerifiedStamp};
  ok = ok && futimens(fd, times) == 0;
  ok = close(fd) == 0 && ok;
  if (!ok || rename(tmp.c_str(), path.c_str()) != 0) {
    log::debug("module cache: cannot write %s: %s", path.c_str(), std::strerror(errno));
    unlink(tmp.c_str());
  }
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
