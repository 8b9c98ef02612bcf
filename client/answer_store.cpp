// Implementation of client/answer_store.h.
#include "client/answer_store.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdio>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <unordered_map>

#include "client/call.h"
#include "client/contexts.h"
#include "client/runtime.h"
#include "common/crypto.h"
#include "common/env.h"
#include "common/files.h"
#include "common/log.h"

namespace rgpu::client::answer_store {
namespace {

std::mutex& mu() {
  static auto* m = new std::mutex;  // leaked: used from exit handlers
  return *m;
}
auto& g_answers = *new std::unordered_map<std::string, std::string>();
bool g_loaded = false;
std::string g_path;  // "" when off


// Reads the file once (mu() held).
void load_locked() {
  if (g_loaded) return;
  g_loaded = true;
  const std::string& setting = env::get().answer_cache;
  g_path = setting.empty() ? files::cache_path("answers.txt") : setting == "none" || setting == "0" ? "" : setting;
  if (g_path.empty()) return;
  struct stat st {};
  if (stat(g_path.c_str(), &st) == 0 && static_cast<size_t>(st.st_size) > kMaxFileBytes) {
    log::info("answer cache %s is past %zu MiB; starting it over", g_path.c_str(), kMaxFileBytes >> 20);
    unlink(g_path.c_str());
    return;
  }
  FILE* f = fopen(g_path.c_str(), "r");
  if (!f) return;
  std::string line;
  for (int c; (c = fgetc(f)) != EOF;) {
    if (c != '\n') {
      line.push_back(static_cast<char>(c));
      continue;
    }
    size_t tab = line.find('\t');
    if (tab != std::string::npos && tab > 0 && line.find('\t', tab + 1) == std::string::npos)
      g_answers.insert_or_assign(line.substr(0, tab), line.substr(tab + 1));
    line.clear();
  }
  fclose(f);  // a last line with no newline was cut short by a writer: ignored
}

}  // namespace

bool enabled() {
  std::lock_guard lk(mu());
  load_locked();
  return !g_path.empty();
}

bool lookup(const std::string& key, std::string* value) {
  std::lock_guard lk(mu());
  load_locked();
  auto it = g_answers.find(key);
  if (it == g_answers.end()) return false;
  *value = it->second;
  return true;
}

void store(const std::string& key, const std::string& value) {
  if (key.find_first_of("\t\n") != std::string::npos || value.find_first_of("\t\n") != std::string::npos) return;
  std::lock_guard lk(mu());
  load_locked();
  if (g_path.empty()) return;
  auto [it, fresh] = g_answers.try_emplace(key, value);
  if (!fresh) {
    if (it->second == value) return;
    it->second = value;  // a stored answer that did not parse, now corrected (later lines win)
  }
  // One write(2) of the whole line with O_APPEND: processes appending at once do not interleave
  // inside a line.
  std::string line = key + "\t" + value + "\n";
  int fd = open(g_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  if (fd < 0 && errno == ENOENT) {
    size_t slash = g_path.rfind('/');
    if (slash != std::string::npos && slash > 0) files::make_dirs(g_path.substr(0, slash));
    fd = open(g_path.c_str(), O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0600);
  }
  if (fd < 0) {
    static bool told = false;
    if (!told) log::warn("cannot write the answer cache %s (%s); later runs will ask again", g_path.c_str(), strerror(errno));
    told = true;
    return;
  }
  ssize_t n = write(fd, line.data(), line.size());
  (void)n;
  close(fd);
}

bool parse_pairs(const std::string& text, char sep, long long lo, long long hi,
                 std::vector<std::pair<long long, long long>>* out) {
  const char* p = text.c_str();
  while (*p) {
    char* end = nullptr;
    errno = 0;
    long long a = std::strtoll(p, &end, 10);
    if (end == p || *end != sep) return false;
    p = end + 1;
    long long b = std::strtoll(p, &end, 10);
    if (errno || end == p || *end != ',' || a < lo || a > hi || b < lo || b > hi) return false;
    out->emplace_back(a, b);
    p = end + 1;
  }
  return true;
}

std::string device_tag(CUdevice dev) {
  if (dev < 0 && !contexts::device_of(contexts::current(), &dev)) return "";
  const proto::DeviceInfo* d = device_info(dev);
  if (!d) return "";
  return crypto::hex(d->uuid.data(), d->uuid.size()) + "/" + std::to_string(snapshot().driver_version);
}

}  // namespace rgpu::client::answer_store
