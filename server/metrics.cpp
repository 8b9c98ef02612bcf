// Implementation of server/metrics.h.
#include "server/metrics.h"

#include <atomic>
#include <cinttypes>
#include <cstdio>

#include "common/log.h"
#include "common/net.h"
#include "server/dispatch.h"

namespace rgpu::server::metrics {
namespace {

std::atomic<bool> g_accepting{true};

// A label value as the exposition format wants it: backslash, double quote and newline escaped.
std::string label(const std::string& v) {
  std::string out;
  for (char c : v) {
    if (c == '\\') out += "\\\\";
    else if (c == '"') out += "\\\"";
    else if (c == '\n') out += "\\n";
    else out += c;
  }
  return out;
}

class Text {
 public:
  // Starts a metric family: its HELP and TYPE lines.
  void family(const char* name, const char* type, const char* help) {
    out_ += log::format("# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
  }
  void sample(const char* name, const std::string& labels, uint64_t v) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += " " + std::to_string(v) + "\n";
  }
  void sample(const char* name, const std::string& labels, double v) {
    out_ += name;
    if (!labels.empty()) out_ += "{" + labels + "}";
    out_ += log::format(" %.3f\n", v);
  }
  std::string take() { return std::move(out_); }

 private:
  std::string out_;
};

std::string op_label(uint32_t op) {
  if (op == proto::table::kOtherOps) return "other";
  const char* name = op_name(static_cast<uint16_t>(op));
  return name ? label(name) : "op " + std::to_string(op);
}

std::string session_labels(const proto::table::SessionInfo& s) {
  return "session=\"" + std::to_string(s.pid) + "\",client=\"" + label(s.identity) + "\",tenant=\"" +
         label(s.tenant) + "\"";
}

}  // namespace

std::string render(const proto::table::Snapshot& s) {
  Text t;
  unsigned connected = 0, grace = 0;
  for (const auto& session : s.sessions) (session.connected ? connected : grace) += 1;
  t.family("rgpu_sessions", "gauge",
           "Sessions of this rgpu-server: connected, or in grace (the connection broke; the session waits "
           "--session-grace for its client to come back).");
  t.sample("rgpu_sessions", "state=\"connected\"", uint64_t{connected});
  t.sample("rgpu_sessions", "state=\"grace\"", uint64_t{grace});
  t.family("rgpu_handshakes_pending", "gauge", "Connections in their handshake now.");
  t.sample("rgpu_handshakes_pending", "", uint64_t{s.pending_handshakes});

  t.family("rgpu_calls_total", "counter", "Calls clients sent, by op (CUDA and NVML entry points, rgpu's own ops).");
  for (const auto& [op, n] : s.ops) t.sample("rgpu_calls_total", "op=\"" + op_label(op) + "\"", n.first);
  t.family("rgpu_round_trips_total", "counter",
           "Calls whose client waited for the reply (the rest were one-way), by op.");
  for (const auto& [op, n] : s.ops)
    if (n.second) t.sample("rgpu_round_trips_total", "op=\"" + op_label(op) + "\"", n.second);
  t.family("rgpu_bytes_total", "counter", "Frame bytes (headers and payloads) received from and sent to clients.");
  t.sample("rgpu_bytes_total", "direction=\"received\"", s.totals.bytes_received);
  t.sample("rgpu_bytes_total", "direction=\"sent\"", s.totals.bytes_sent);

  t.family("rgpu_session_gpu_memory_bytes", "gauge", "GPU memory each live session holds (its allocations).");
  for (const auto& session : s.sessions)
    t.sample("rgpu_session_gpu_memory_bytes", session_labels(session), session.gpu_bytes);
  t.family("rgpu_session_host_memory_bytes", "gauge",
           "Server host memory each live session holds for mapped and managed buffers' copies.");
  for (const auto& session : s.sessions)
    t.sample("rgpu_session_host_memory_bytes", session_labels(session), session.host_bytes);
  t.family("rgpu_session_calls_total", "counter", "Calls each live session's client sent.");
  for (const auto& session : s.sessions)
    t.sample("rgpu_session_calls_total", session_labels(session), session.counts.calls);
  t.family("rgpu_session_uptime_seconds", "gauge", "How long each live session has had its process.");
  for (const auto& session : s.sessions)
    t.sample("rgpu_session_uptime_seconds", session_labels(session), session.uptime_s);

  t.family("rgpu_handshake_failures_total", "counter",
           "Connections refused in their handshake, by reason (port checks that closed before a word are not "
           "counted).");
  for (int r = 0; r < proto::table::kFailureReasons; ++r)
    t.sample("rgpu_handshake_failures_total",
             std::string("reason=\"") + proto::table::failure_name(static_cast<proto::table::FailureReason>(r)) + "\"",
             s.handshake_failures[r]);
  t.family("rgpu_module_cache_hits_total", "counter",
           "Module images a client asked for by hash and the server had in its module cache.");
  t.sample("rgpu_module_cache_hits_total", "", s.module_cache_hits);
  t.family("rgpu_module_cache_misses_total", "counter",
           "Module images asked for by hash that the cache lacked (the client then sent the image).");
  t.sample("rgpu_module_cache_misses_total", "", s.module_cache_misses);

  t.family("rgpu_driver_ready", "gauge",
           "1 when the last spare session process started the driver (cuInit succeeded), else 0.");
  t.sample("rgpu_driver_ready", "", uint64_t{s.driver.known && s.driver.init_result == 0 ? 1u : 0u});
  return t.take();
}

http::Response health(const proto::table::Snapshot& s, bool accepting) {
  http::Response r;
  const auto& d = s.driver;
  if (!accepting) {
    r.status = 503;
    r.body = "draining: this server stopped accepting connections (SIGTERM or SIGINT)\n";
  } else if (!d.known) {
    r.status = 503;
    r.body = "starting: no spare session process has started the driver yet (with --prewarm none none does)\n";
  } else if (d.init_result != 0) {
    r.status = 503;
    r.body = log::format("driver: cuInit failed with %d; the server cannot serve clients (see its log)\n",
                         static_cast<int>(d.init_result));
  } else {
    r.body = log::format("ok\ndriver: CUDA %d.%d, %d GPU%s", d.version / 1000, d.version % 1000 / 10,
                         static_cast<int>(d.devices), d.devices == 1 ? "" : "s");
    if (d.devices > 0)
      r.body += log::format(", GPU 0 %s with %" PRIu64 " MiB", d.gpu0, static_cast<uint64_t>(d.gpu0_memory >> 20));
    r.body += log::format("\nsessions: %zu\n", s.sessions.size());
  }
  return r;
}

int bind(const std::string& address, std::string* err) {
  net::Address a;
  if (!net::parse_address(address, 9714, &a, err)) return -1;
  int fd = net::listen_tcp(a, err);
  if (fd >= 0) log::info("metrics on http://%s/metrics, health on /healthz", a.str().c_str());
  if (fd >= 0 && !net::is_loopback(a.host))
    log::warn("--metrics-listen %s is beyond loopback: anyone who reaches it reads the clients' names and tenants "
              "(plain HTTP, no authentication); keep it on a trusted network",
              a.str().c_str());
  return fd;
}

void start(int fd) {
  http::serve(fd, [](const http::Request& req) {
    http::Response r;
    if (req.path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = render(proto::table::snapshot());
    } else if (req.path == "/healthz") {
      r = health(proto::table::snapshot(), g_accepting.load());
    } else {
      r.status = 404;
      r.body = "not found: this endpoint serves /metrics and /healthz\n";
    }
    return r;
  });
}

void stopped_accepting() { g_accepting.store(false); }

}  // namespace rgpu::server::metrics
