// Small file-system helpers the on-disk caches share (server/module_cache.cpp,
// client/dark_api/nvrtc_cache.cpp, client/answer_store.cpp). Sockets have theirs in net.h.
#pragma once

#include <cstddef>
#include <string>

namespace rgpu::files {

// Creates `dir` and any missing parents, each 0700 (mkdir -p). True when `dir` is then a directory.
bool make_dirs(const std::string& dir);
// Writes all n bytes to a file descriptor, retrying after signals. False on error.
bool write_all(int fd, const void* data, size_t n);
// The client's cache file or directory `name`: $XDG_CACHE_HOME/rgpu/NAME, else ~/.cache/rgpu/NAME;
// "" when neither variable is set.
std::string cache_path(const std::string& name);

}  // namespace rgpu::files
