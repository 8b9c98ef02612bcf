// Implementation of common/env.h.
#include "common/env.h"

#include <algorithm>
#include <cstdlib>
#include <mutex>

namespace rgpu::env {
namespace {

// Leaked on purpose: read by calls made from exit handlers, after static destructors.
Settings& g_settings = *new Settings();
std::once_flag g_once;

std::string str(const char* name, const std::string& def) {
  const char* v = std::getenv(name);
  return v && *v ? std::string(v) : def;
}

void read_all() {
  Settings s;
  s.server = str("RGPU_SERVER", s.server);
  s.opserver = str("RGPU_OPSERVER", s.opserver);
  s.token = str("RGPU_TOKEN", "");
  s.trace = str("RGPU_TRACE", "0");
  s.stats = str("RGPU_STATS", "");
  s.batch = str("RGPU_BATCH", "1") != "0";
  s.log = str("RGPU_LOG", "info");
  s.connect_timeout_s = std::atoi(str("RGPU_CONNECT_TIMEOUT", "10").c_str());
  if (s.connect_timeout_s <= 0) s.connect_timeout_s = 10;
  long long chunk = std::atoll(str("RGPU_BULK_CHUNK", "0").c_str());
  if (chunk > 0) s.bulk_chunk = static_cast<size_t>(std::clamp(chunk, 64ll << 10, 32ll << 20));
  s.oneway_loads = str("RGPU_ONEWAY_LOADS", "1") != "0";
  s.oneway_sync = str("RGPU_ONEWAY_SYNC", "1") != "0";
  s.alloc_ahead = str("RGPU_ALLOC_AHEAD", "1") != "0";
  s.answer_cache = str("RGPU_ANSWER_CACHE", "");
  s.nvrtc_cache = str("RGPU_NVRTC_CACHE", "");
  s.tools_stream = str("RGPU_TOOLS_STREAM", "1") != "0";
  s.image_layouts = str("RGPU_IMAGE_LAYOUTS", "1") != "0";
  if (const char* v = std::getenv("CUDA_VISIBLE_DEVICES")) {
    s.has_visible_devices = true;
    s.visible_devices = v;
  }
  g_settings = s;
}

}  // namespace

const Settings& get() {
  std::call_once(g_once, read_all);
  return g_settings;
}

void reload() {
  std::call_once(g_once, [] {});
  read_all();
}

}  // namespace rgpu::env
