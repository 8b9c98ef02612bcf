// cuMemcpyDtoD_v2, cuMemcpyDtoDAsync_v2, cuMemcpyPeer, cuMemcpyPeerAsync (and their _ptds/_ptsz
// forms) between devices of two servers (RGPU_SERVER=a,b): the bytes go from the source server
// straight to the destination server (protocol/messages.h kOpPeerTicket, kOpPeerSend,
// kOpPeerReceive), never through this process. Within one server the calls are forwarded as
// generated (rgpu_fwd_*).
//
// Per pair of servers the client asks the destination once for a ticket (a round trip), which the
// source presents when it dials the destination. Per copy it then sends the source "send copy N"
// and the destination "receive copy N into dst", each in its own server's call order for this
// thread, one-way for the async forms: the source sends after its stream's earlier work, the
// destination writes before anything later on its stream runs. A stream names one server; on the
// other side the copy waits for the whole context's earlier work instead (stricter than the
// driver, never looser). Links run TLS when the destination's session does. Where the destination
// cannot take a link (it cannot listen), the bytes stage through this process, synchronously.
// When the source answers a synchronous copy with a failure, the destination is told
// (kOpPeerCancel), so that it does not wait for bytes that will not come.
#include <cuda.h>

#include <atomic>
#include <map>
#include <mutex>
#include <utility>
#include <vector>

#include "client/call.h"
#include "client/runtime.h"
#include "common/log.h"
#include "common/net.h"
#include "gen/client_forward.gen.h"
#include "gen/export.gen.h"
#include "protocol/wire/copy.h"

namespace {

using rgpu::client::Call;
namespace proto = rgpu::proto;

struct Ticket {
  bool direct = false;  // false: the destination takes no links; stage through the client
  std::string host;
  uint16_t port = 0;
  proto::wire::PeerTicket secret{};
  std::string fingerprint;  // the destination's certificate: the link runs TLS ("": plain TCP)
};

std::mutex g_tickets_mu;
std::map<std::pair<int, int>, Ticket> g_tickets;  // by (source, destination) server
std::atomic<uint64_t> g_next_copy{1};

// The ticket for links from server `from` to server `to`, asked of `to` the first time.
CUresult ticket(int from, int to, Ticket* out) {
  std::lock_guard<std::mutex> lock(g_tickets_mu);
  auto it = g_tickets.find({from, to});
  if (it != g_tickets.end()) {
    *out = it->second;
    return CUDA_SUCCESS;
  }
  Call c(proto::kOpPeerTicket, rgpu::client::kWaits);
  c.to_server(to);
  CUresult rc = c.invoke();
  Ticket t;
  if (rc == CUDA_SUCCESS) {
    t.port = c.reply().get<uint16_t>();
    c.reply().take(t.secret.data(), t.secret.size());
    t.fingerprint = c.reply().str(80);
    rgpu::net::Address a;
    std::string err;
    rgpu::client::Connection* conn = rgpu::client::connection(to);
    t.direct = c.reply().ok() && conn && rgpu::net::parse_address(conn->server_name(), 0, &a, &err);
    t.host = a.host;
  } else if (rc != CUDA_ERROR_NOT_SUPPORTED) {
    return rc;
  }
  g_tickets[{from, to}] = t;
  *out = t;
  return CUDA_SUCCESS;
}

// Stages n bytes through this process: a device-to-host copy from the source, then host-to-device
// to the destination, both synchronous (so after all earlier work on either side).
CUresult staged(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  constexpr size_t kStage = 16u << 20;
  std::vector<uint8_t> buf(std::min(n, kStage));
  for (size_t off = 0; off < n;) {
    const size_t len = std::min(n - off, kStage);
    if (CUresult rc = cuMemcpyDtoH_v2(buf.data(), src + off, len)) return rc;
    if (CUresult rc = cuMemcpyHtoD_v2(dst + off, buf.data(), len)) return rc;
    off += len;
  }
  return CUDA_SUCCESS;
}

// Whether the copy spans two servers (then *rc is its result), using the contexts where the
// pointers are not on record.
bool across_servers(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx, size_t n,
                    CUstream stream, bool async, CUresult* rc) {
  if (!rgpu::client::several_servers()) return false;
  int to = rgpu::client::pointer_server(dst);
  int from = rgpu::client::pointer_server(src);
  if (to < 0) to = rgpu::client::handle_server(rgpu::client::handle_id(dst_ctx));
  if (from < 0) from = rgpu::client::handle_server(rgpu::client::handle_id(src_ctx));
  if (to < 0 || from < 0 || to == from) return false;
  rgpu::client::trace_call("copy between servers");
  if (n == 0) {
    *rc = CUDA_SUCCESS;
    return true;
  }
  Ticket t;
  if ((*rc = ticket(from, to, &t)) != CUDA_SUCCESS) return true;
  if (!t.direct) {
    *rc = staged(dst, src, n);
    return true;
  }
  const int stream_server = rgpu::client::handle_server(rgpu::client::handle_id(stream));
  const uint64_t copy = g_next_copy.fetch_add(1);
  proto::wire::PeerSend send{copy,   t.host, t.port, t.secret, src, n, stream_server == from,
                             rgpu::client::handle_id(stream), t.fingerprint};
  proto::wire::PeerReceive receive{copy, dst, n, stream_server == to, rgpu::client::handle_id(stream)};
  // The source's half goes out now (a waiting call's submit flushes, an async one is flushed
  // here): the destination's worker will wait for its bytes.
  Call s(proto::kOpPeerSend, async ? rgpu::client::kOneWay : rgpu::client::kWaits);
  s.to_server(from);
  if (send.has_stream) s.on_stream(stream);
  proto::wire::put_peer_send(s.args(), send);
  Call r(proto::kOpPeerReceive, async ? rgpu::client::kOneWay : rgpu::client::kWaits);
  r.to_server(to);
  if (receive.has_stream) r.on_stream(stream);
  proto::wire::put_peer_receive(r.args(), receive);
  if (async) {
    if ((*rc = s.invoke()) != CUDA_SUCCESS) return true;
    rgpu::client::Connection* conn = rgpu::client::connection(from);
    if (!conn || !conn->flush()) {
      *rc = CUDA_ERROR_DEVICE_UNAVAILABLE;
      return true;
    }
    *rc = r.invoke();
    return true;
  }
  if ((*rc = s.submit()) != CUDA_SUCCESS) return true;
  if ((*rc = r.submit()) != CUDA_SUCCESS) {
    s.finish();
    return true;
  }
  // The source's answer first: when its link failed, the reason is said at once, though the
  // destination may wait for the bytes a while longer before its answer ends the copy.
  const CUresult sent = s.finish();
  if (sent != CUDA_SUCCESS) {
    // The source says why when its link to the destination failed (an older server says
    // nothing); an async copy's failure comes back as a bare result with a later call, and the
    // source's log holds the reason.
    const std::string why = rgpu::log::printable(s.reply().str(proto::kMaxPeerSendError));
    if (!why.empty()) rgpu::log::error("a copy between servers failed: %s", why.c_str());
    // The destination may not have heard (the source could not dial it): it ends its receive
    // now instead of waiting for bytes (kOpPeerCancel; a no-op where it has been told already).
    Call x(proto::kOpPeerCancel, rgpu::client::kOneWay);
    x.to_server(to);
    proto::wire::put_peer_cancel(x.args(), {copy, static_cast<int32_t>(sent)});
    rgpu::client::Connection* conn = rgpu::client::connection(to);
    if (x.invoke() == CUDA_SUCCESS && conn) conn->flush();
  }
  const CUresult received = r.finish();
  *rc = sent != CUDA_SUCCESS ? sent : received;
  return true;
}

}  // namespace

extern "C" {

RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUresult rc;
  if (across_servers(dst, nullptr, src, nullptr, n, nullptr, false, &rc)) return rc;
  return rgpu_fwd_cuMemcpyDtoD_v2(dst, src, n);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  CUresult rc;
  if (across_servers(dst, nullptr, src, nullptr, n, stream, true, &rc)) return rc;
  return rgpu_fwd_cuMemcpyDtoDAsync_v2(dst, src, n, stream);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyPeer(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                          size_t n) {
  CUresult rc;
  if (across_servers(dst, dst_ctx, src, src_ctx, n, nullptr, false, &rc)) return rc;
  return rgpu_fwd_cuMemcpyPeer(dst, dst_ctx, src, src_ctx, n);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                               size_t n, CUstream stream) {
  CUresult rc;
  if (across_servers(dst, dst_ctx, src, src_ctx, n, stream, true, &rc)) return rc;
  return rgpu_fwd_cuMemcpyPeerAsync(dst, dst_ctx, src, src_ctx, n, stream);
}

// The per-thread default stream forms: a stream of one server is that server's either way.
RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoD_v2_ptds(CUdeviceptr dst, CUdeviceptr src, size_t n) {
  CUresult rc;
  if (across_servers(dst, nullptr, src, nullptr, n, nullptr, false, &rc)) return rc;
  return rgpu_fwd_cuMemcpyDtoD_v2_ptds(dst, src, n);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyDtoDAsync_v2_ptsz(CUdeviceptr dst, CUdeviceptr src, size_t n, CUstream stream) {
  CUresult rc;
  if (across_servers(dst, nullptr, src, nullptr, n, stream, true, &rc)) return rc;
  return rgpu_fwd_cuMemcpyDtoDAsync_v2_ptsz(dst, src, n, stream);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyPeer_ptds(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                               size_t n) {
  CUresult rc;
  if (across_servers(dst, dst_ctx, src, src_ctx, n, nullptr, false, &rc)) return rc;
  return rgpu_fwd_cuMemcpyPeer_ptds(dst, dst_ctx, src, src_ctx, n);
}

RGPU_EXPORT CUresult CUDAAPI cuMemcpyPeerAsync_ptsz(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src,
                                                    CUcontext src_ctx, size_t n, CUstream stream) {
  CUresult rc;
  if (across_servers(dst, dst_ctx, src, src_ctx, n, stream, true, &rc)) return rc;
  return rgpu_fwd_cuMemcpyPeerAsync_ptsz(dst, dst_ctx, src, src_ctx, n, stream);
}

}  // extern "C"
