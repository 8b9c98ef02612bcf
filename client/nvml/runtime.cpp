// The NVML shim's connection to rgpu-server and the Call machinery of client/nvml/call.h.
#include <algorithm>
#include <atomic>
#include <cstring>
#include <mutex>
#include <set>
#include <string>
#include <vector>

#include "client/connection.h"
#include "client/nvml/call.h"
#include "common/env.h"
#include "common/log.h"
#include "gen/nvml_enums.gen.h"
#include "protocol/client_session.h"
#include "protocol/messages.h"
#include "protocol/wire/control.h"

namespace rgpu::client::nvml {
namespace {

std::mutex g_mu;
// Every server's connection, in RGPU_SERVER's order; never freed: the process may call NVML until
// it exits.
std::vector<Connection*>& g_conns = *new std::vector<Connection*>();
std::atomic<int> g_server_count{1};
std::atomic<uint32_t> g_next_thread{1};
std::atomic<uint64_t> g_connections{0};

uint32_t thread_id() {
  thread_local uint32_t id = g_next_thread.fetch_add(1);
  return id;
}

Connection* conn(int server = 0) {
  std::lock_guard<std::mutex> lock(g_mu);
  return server >= 0 && static_cast<size_t>(server) < g_conns.size() ? g_conns[server] : nullptr;
}

}  // namespace

namespace detail {
thread_local Route t_route;
}

int server_count() { return g_server_count.load(std::memory_order_relaxed); }

nvmlReturn_t connect() {
  std::lock_guard<std::mutex> lock(g_mu);
  bool whole = !g_conns.empty();
  for (Connection* c : g_conns) whole = whole && !c->broken();
  if (whole) return NVML_SUCCESS;
  log::set_prefix("rgpu nvml");
  const env::Settings& s = env::get();
  std::string err;
  std::vector<std::string> servers;
  std::vector<Connection*> conns;
  if (proto::split_server_list(s.server, &servers, &err)) {
    for (const std::string& server : servers) {
      Connection* c = Connection::open(server, s.token, &err);
      if (!c) {
        conns.clear();  // those opened are leaked: rare, and a thread may hold none of them yet
        break;
      }
      conns.push_back(c);
    }
  }
  if (conns.empty()) {
    log::error("cannot reach the GPU: %s", err.c_str());
    // A refused token is a permission problem; anything else looks like a missing driver to tools.
    return err.find("token") != std::string::npos ? NVML_ERROR_NO_PERMISSION : NVML_ERROR_DRIVER_NOT_LOADED;
  }
  g_conns = conns;  // broken predecessors are leaked on purpose: another thread may still hold one
  g_server_count.store(static_cast<int>(conns.size()));
  g_connections.fetch_add(1);
  return NVML_SUCCESS;
}

uint64_t connection_number() { return g_connections.load(); }

bool connected() {
  Connection* c = conn();
  return c && !c->broken();
}

// Under RGPU_TRACE: each call forwarded, and a failed one's result by name (nvml.h's).
void trace(const char* name, nvmlReturn_t rc) {
  FILE* t = log::trace_stream();
  if (!t) return;
  if (rc == NVML_SUCCESS) {
    fprintf(t, "rgpu-trace nvml tid=%u %s\n", thread_id(), name);
  } else {
    const char* n = nvml_enum::enum_name(nvml_enum::knvmlReturn_t, rc);
    fprintf(t, "rgpu-trace nvml tid=%u %s -> %s (%d)\n", thread_id(), name,
            n ? n : "an nvmlReturn_t nvml.h does not name", static_cast<int>(rc));
  }
  fflush(t);
}

nvmlReturn_t Call::invoke() {
  nvmlReturn_t rc = invoke_once();
  trace(name_, rc);
  return rc;
}

nvmlReturn_t Call::invoke_once() {
  const int server = detail::t_route.server < 0 ? 0 : detail::t_route.server;
  if (detail::t_route.mixed) {
    log::warn("%s names GPUs of two servers; a call acts on one server's GPUs, so rgpu answers "
              "NVML_ERROR_NOT_SUPPORTED", name_);
    return NVML_ERROR_NOT_SUPPORTED;
  }
  Connection* c = conn(server);
  if (!c) return server == 0 ? NVML_ERROR_UNINITIALIZED : NVML_ERROR_INVALID_ARGUMENT;  // no such server
  detail::t_route.last = server;
  ReplySlot slot;
  if (!c->call(op_, thread_id(), args_buf_.data(), args_buf_.size(), nullptr, 0, &slot)) {
    log::error("%s: the connection to rgpu-server at %s is gone", name_, c->server_name().c_str());
    return NVML_ERROR_GPU_IS_LOST;
  }
  reply_buf_ = std::move(slot.payload);
  reply_reader_ = Reader(reply_buf_.data(), reply_buf_.size());
  reply_reader_.get<proto::ReplyPrefix>();  // NVML calls are never one-way: nothing is deferred
  int32_t rc = reply_reader_.i32();
  if (!reply_reader_.ok()) return bad_reply();
  // CUDA_ERROR_NOT_SUPPORTED and nothing after it: a server that has no handler for the op (no
  // NVML handlers, or an older server); kOpSessionControl's own NOT_SUPPORTED carries a message.
  if (rc == 801 && reply_reader_.left() == 0) {
    log::warn("%s: rgpu-server at %s does not serve NVML calls (an older server?)", name_,
              c->server_name().c_str());
    return NVML_ERROR_NOT_SUPPORTED;
  }
  replied_ = true;
  return static_cast<nvmlReturn_t>(rc);
}

nvmlReturn_t Call::bad_reply() {
  log::error("%s: rgpu-server sent a reply that does not decode (%zu bytes); is it the same rgpu version?",
             name_, reply_buf_.size());
  return NVML_ERROR_UNKNOWN;
}

nvmlReturn_t unsupported(const char* name) {
  static std::mutex mu;
  static std::set<std::string> seen;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (!seen.insert(name).second) return NVML_ERROR_NOT_SUPPORTED;
  }
  log::warn("%s is not forwarded by rgpu (see gen/nvml_coverage.txt); answering NVML_ERROR_NOT_SUPPORTED", name);
  return NVML_ERROR_NOT_SUPPORTED;
}

nvmlReturn_t unsupported_size(const char* name, long long count) {
  log::warn("%s: an array of %lld elements is more than rgpu carries (%u); answering NVML_ERROR_INVALID_ARGUMENT",
            name, count, kMaxArray);
  return NVML_ERROR_INVALID_ARGUMENT;
}

void copy_string(const std::string& s, char* dst, unsigned int len) {
  if (!dst || len == 0) return;
  size_t n = std::min<size_t>(s.size(), len - 1);
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

}  // namespace rgpu::client::nvml

// For rgpu-smi: the server's live sessions (protocol/messages.h kOpSessions), one line each:
// "pid<TAB>identity<TAB>peer<TAB>start unix seconds<TAB>1 if this process's own<TAB>GPU memory
// bytes<TAB>calls<TAB>calls per second in thousandths<LF>" (the last three "-" where the server
// does not count the session), into buf.
// Returns the bytes the whole list needs (call again with a larger buf if that is more than len),
// or -1 when the server cannot be asked.
extern "C" __attribute__((visibility("default"))) long rgpu_nvml_sessions(char* buf, size_t len) {
  using namespace rgpu;
  using namespace rgpu::client::nvml;
  if (!connected()) return -1;
  Call c(proto::kOpSessions, "rgpu_nvml_sessions");
  if (c.invoke() != NVML_SUCCESS) return -1;
  std::vector<proto::wire::SessionEntry> list;
  if (!proto::wire::read_sessions(c.reply(), &list)) return -1;
  std::string text;
  // One line a session: pid, identity, peer, start, self, then (when the server counts it) GPU
  // memory bytes, calls, calls per second in thousandths; "-" for each where it does not.
  for (const auto& e : list) {
    text += std::to_string(e.pid) + "\t" + e.identity + "\t" + e.peer + "\t" + std::to_string(e.start) + "\t" +
            (e.self ? "1" : "0");
    for (uint64_t v : {e.gpu_bytes, e.calls, e.calls_per_s_milli}) text += "\t" + (e.counted ? std::to_string(v) : "-");
    text += "\n";
  }
  if (buf && len) {
    size_t k = std::min(len - 1, text.size());
    std::memcpy(buf, text.data(), k);
    buf[k] = 0;
  }
  return static_cast<long>(text.size() + 1);
}

// For rgpu-smi suspend | resume | migrate (protocol/messages.h kOpSessionControl): asks the
// server to act on session pid; writes the server's message (what happened, or why not) into msg
// and the session's state after it (a CUprocessState, 255 unknown) into *state. Returns the
// server's CUresult (0: done), or -1 when the server cannot be asked (msg says why).
extern "C" __attribute__((visibility("default"))) int rgpu_nvml_session_control(int action, unsigned pid, int gpu,
                                                                                char* msg, size_t len, int* state) {
  using namespace rgpu;
  using namespace rgpu::client::nvml;
  auto put = [&](const std::string& text) {
    if (!msg || !len) return;
    size_t k = std::min(len - 1, text.size());
    std::memcpy(msg, text.data(), k);
    msg[k] = 0;
  };
  if (state) *state = proto::kSessionStateUnknown;
  if (!connected()) {
    put("not connected to rgpu-server");
    return -1;
  }
  Call c(static_cast<uint16_t>(proto::kOpSessionControl), "rgpu_nvml_session_control");
  proto::wire::put_session_control(c.args(), {static_cast<uint8_t>(action), pid, gpu});
  nvmlReturn_t rc = c.invoke();
  if (!c.replied()) {
    put(rc == NVML_ERROR_NOT_SUPPORTED ? "this rgpu-server cannot suspend or move sessions (an older server?)"
                                       : "the connection to rgpu-server broke");
    return -1;
  }
  proto::wire::SessionControlReply reply;
  if (!proto::wire::read_session_control_reply(c.reply(), &reply)) {
    put("rgpu-server sent a reply that does not decode (is it the same rgpu version?)");
    return -1;
  }
  put(reply.message);
  if (state) *state = reply.state;
  return static_cast<int>(rc);
}
