// Implementation of common/log.h: lines are written with one write(2) each so lines from
// several threads or processes never interleave mid-line.
#include "common/log.h"

#include "common/env.h"

#include <unistd.h>

#include <atomic>
#include <mutex>
#include <vector>

namespace rgpu::log {
namespace {

std::mutex g_prefix_mu;
// Leaked on purpose: logging must work from exit handlers, after static destructors.
std::string& g_prefix = *new std::string("rgpu");
std::atomic<int> g_level{kInfo};

std::string vformat(const char* fmt, va_list ap) {
  va_list ap2;
  va_copy(ap2, ap);
  int n = vsnprintf(nullptr, 0, fmt, ap2);
  va_end(ap2);
  if (n <= 0) return {};
  std::string s(static_cast<size_t>(n), '\0');
  vsnprintf(s.data(), s.size() + 1, fmt, ap);
  return s;
}

void emit(Level lv, const char* fmt, va_list ap) {
  if (lv > g_level.load(std::memory_order_relaxed)) return;
  static const char* kTags[] = {"error: ", "warning: ", "", "debug: "};
  std::string line;
  {
    std::lock_guard<std::mutex> lock(g_prefix_mu);
    line = g_prefix;
  }
  line += ": ";
  line += kTags[lv];
  line += vformat(fmt, ap);
  line += '\n';
  ssize_t ignored = ::write(2, line.data(), line.size());
  (void)ignored;
}

}  // namespace

void set_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_prefix_mu);
  g_prefix = prefix;
}
void set_level(Level level) { g_level.store(level); }
Level level() { return static_cast<Level>(g_level.load()); }

#define RGPU_LOG_FN(name, lv)        \
  void name(const char* fmt, ...) {  \
    va_list ap;                      \
    va_start(ap, fmt);               \
    emit(lv, fmt, ap);               \
    va_end(ap);                      \
  }
RGPU_LOG_FN(error, kError)
RGPU_LOG_FN(warn, kWarn)
RGPU_LOG_FN(info, kInfo)
RGPU_LOG_FN(debug, kDebug)
#undef RGPU_LOG_FN

std::string format(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  std::string s = vformat(fmt, ap);
  va_end(ap);
  return s;
}

std::string printable(std::string text) {
  for (char& c : text) {
    if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) c = '?';
  }
  return text;
}

FILE* trace_stream() {
  static FILE* const stream = [] () -> FILE* {
    const std::string& t = env::get().trace;
    if (t == "0" || t.empty()) return nullptr;
    if (t == "1") return stdout;
    if (t == "2") return stderr;
    FILE* f = fopen(t.c_str(), "a");
    if (!f) warn("cannot open RGPU_TRACE file '%s'; tracing is off", t.c_str());
    return f;
  }();
  return stream;
}

}  // namespace rgpu::log
