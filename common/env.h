// Every environment variable rgpu reads, in one table, read in one place.
//
// | variable        | side   | meaning                                                          |
// |-----------------|--------|------------------------------------------------------------------|
// | RGPU_SERVER     | client | host:port[,host:port...] of rgpu-server (default 127.0.0.1:9713) |
// | RGPU_OPSERVER   | client | host:port of rgpu-opserver (default 127.0.0.1:9720)              |
// | RGPU_TOKEN      | both   | shared secret for the challenge-response handshake               |
// | RGPU_TRACE      | client | 0 off, 1 stdout, 2 stderr, anything else: a file path; one line  |
// |                 |        | per driver call                                                  |
// | RGPU_STATS      | client | a file path: call statistics written at exit                     |
// | RGPU_BATCH      | client | 0: every call waits for its reply (debugging); default 1         |
// | RGPU_LOG        | both   | error, warn, info (default), debug                               |
// | RGPU_CONNECT_TIMEOUT | client | seconds to wait for the handshake (default 10)            |
// | RGPU_BULK_CHUNK | client | bytes per bulk-copy frame (default 1 MiB, 64 KiB..32 MiB); a     |
// |                 |        | tuning knob for benchmarks                                       |
// | RGPU_ONEWAY_LOADS | client | 0: every module load waits for its answer (client/modules.cpp) |
// | RGPU_TOOLS_STREAM | client | 1: TOOLS_CONTEXT slot 51's argument read as a stream          |
// |                 |        | (diagnostic; client/dark_api/tools_context.cpp)                  |
// | CUDA_VISIBLE_DEVICES | client | which of the server's GPUs the program sees, as with CUDA:  |
// |                 |        | indices or UUIDs (GPU-...), up to the first invalid entry        |
#pragma once

#include <string>

namespace rgpu::env {

struct Settings {
  std::string server = "127.0.0.1:9713";
  std::string opserver = "127.0.0.1:9720";
  std::string token;
  std::string trace = "0";
  std::string stats;
  bool batch = true;
  std::string log = "info";
  int connect_timeout_s = 10;
  size_t bulk_chunk = 1u << 20;
  bool oneway_loads = true;
  // RGPU_ONEWAY_SYNC=0: every synchronize waits, even after only copies to the device
  // (client/device_work.h).
  bool oneway_sync = true;
  // RGPU_ALLOC_AHEAD=0: every cuMemAlloc asks the server (client/device_memory.h).
  bool alloc_ahead = true;
  // RGPU_ANSWER_CACHE: the file of answers kept across runs, "none" for none
  // (client/answer_store.h); empty: the default file.
  std::string answer_cache;
  // RGPU_NVRTC_CACHE: the directory of NVRTC's compiles kept across runs, "none" for none
  // (client/dark_api/nvrtc_cache.cpp); empty: the default directory.
  std::string nvrtc_cache;
  bool tools_stream = true;
  // RGPU_IMAGE_LAYOUTS=0: kernel parameter layouts are asked from the server instead of read from
  // the images (debugging a launch; tests of the asking path).
  bool image_layouts = true;
  bool has_visible_devices = false;
  std::string visible_devices;
};

// Reads the environment once; later calls return the same values.
const Settings& get();
// Re-reads the environment (tests).
void reload();

}  // namespace rgpu::env
