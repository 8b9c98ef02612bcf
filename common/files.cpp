// Implementation of common/files.h.
#include "common/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdlib>

#include "common/env.h"

namespace rgpu::files {

bool make_dirs(const std::string& dir) {
  for (size_t i = 1; i <= dir.size(); ++i) {
    if (i < dir.size() && dir[i] != '/') continue;
    if (mkdir(dir.substr(0, i).c_str(), 0700) != 0 && errno != EEXIST) return false;
  }
  struct stat st;
  return stat(dir.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

bool write_all(int fd, const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  while (n > 0) {
    ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w <= 0) return false;
    p += w;
    n -= static_cast<size_t>(w);
  }
  return true;
}

std::string cache_path(const std::string& name) {
  const env::Settings& s = env::get();
  if (!s.xdg_cache_home.empty()) return s.xdg_cache_home + "/rgpu/" + name;
  if (!s.home.empty()) return s.home + "/.cache/rgpu/" + name;
  return "";
}

}  // namespace rgpu::files
