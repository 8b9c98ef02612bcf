// Copies between devices of two servers (protocol/messages.h kOpPeerTicket, kOpPeerSend,
// kOpPeerReceive, kOpPeerCancel): the source server A reads the bytes off its device and writes
// them on a link to the destination server B, which writes them to its device; the client sends
// each side its half and never sees the bytes.
//
// Each session is a process of its own, so what is kept here (the link listener, the tickets it
// takes, the links dialled, the chunks that arrived) is this session's. B listens for links on a
// port of its own, on the address its client reached it at, from the first kOpPeerTicket on; a
// link proves itself with a ticket B handed to this session's client, so only a server the client
// chose can write into this session. A ticket stays good for the session: the client asks once
// per pair of servers, and A dials again with the same ticket when the link it kept has closed
// (B restarted its end, the connection dropped), once per copy. B's link threads never touch the driver:
// they keep each copy's chunks until the client thread's worker reaches the copy's kOpPeerReceive,
// which writes them in that thread's call order, after the stream's earlier work. A names each
// copy on its link (kPeerChunkPending) before it waits for its own stream, so B waits for a named
// copy as long as that link lives; B fails a copy when its link ends short of its bytes, when A
// never named it within RGPU_PEER_COPY_WAIT_S, or when the client cancels it (kOpPeerCancel: A
// failed it without reaching B). When the
// session runs over TLS its links do too: A checks B's certificate against the fingerprint B gave
// the client inside the client's own verified TLS connection (kOpPeerTicket), and B knows A by the
// ticket.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "common/crypto.h"
#include "common/env.h"
#include "common/log.h"
#include "common/net.h"
#include "protocol/frame.h"
#include "protocol/tls.h"
#include "protocol/transport.h"
#include "protocol/wire/copy.h"
#include "server/handlers/control.h"

namespace rgpu::server::handlers {
namespace {

using proto::wire::PeerTicket;
using Clock = std::chrono::steady_clock;

// How long B waits for a copy that A has not named on a live link before failing it: A is gone or
// never came (RGPU_PEER_COPY_WAIT_S, default 60).
std::chrono::seconds chunk_wait() { return std::chrono::seconds(env::get().peer_copy_wait_s); }

// Both ends of a link find it dead within 30 s (keepalive after 15 s idle, 3 probes 5 s apart;
// written bytes unacknowledged for 30 s) when the other end vanished without a word (its host
// down, the network cut): below chunk_wait(), and instead of TCP's retransmissions (15 minutes) for
// A's write. A kept link found dead is dialled again; B's link thread ends, failing the copies
// whose bytes were coming on it.
void set_link_liveness(int fd) {
  proto::set_keepalive(fd, std::chrono::seconds(15), std::chrono::seconds(5), 3);
  proto::set_user_timeout(fd, std::chrono::seconds(30));
}

struct Arrived {
  std::deque<std::vector<uint8_t>> chunks;
  int32_t failed = CUDA_SUCCESS;  // the source's error, when it sent kPeerChunkFailed
  uint64_t link = 0;              // the link A named it on (kPeerChunkPending, its chunks): one per copy
  bool link_ended = false;        // that link has ended: no more of its bytes will come
};

// B's side: the listener, the tickets not yet used, and the chunks of copies not yet written.
struct Inbox {
  std::mutex mu;
  std::condition_variable cv;
  std::string host;  // where this session's client reached it; empty outside a session (fuzzing)
  std::shared_ptr<proto::TlsContext> tls;  // the server's, when the session runs over TLS
  int listen_fd = -1;
  uint16_t port = 0;
  std::vector<PeerTicket> tickets;
  std::map<uint64_t, Arrived> copies;
  uint64_t links = 0;  // links accepted so far (Arrived::link)
};
Inbox g_in;

// A's side: one link per destination server, dialled on first use and again after it closed.
struct Link {
  std::mutex mu;  // one chunk at a time on the link
  std::shared_ptr<proto::TlsContext> tls;  // verifies B's certificate (nullptr: a plain link)
  std::unique_ptr<proto::Transport> t;
  int fd = -1;  // t's socket (t owns it), watched for B hanging up
};
std::mutex g_links_mu;
std::map<std::string, std::shared_ptr<Link>> g_links;

// Whether this session handed out ticket t. Tickets are kept: A dials again with the same one.
bool known_ticket(const PeerTicket& t) {
  std::lock_guard<std::mutex> lock(g_in.mu);
  for (const PeerTicket& mine : g_in.tickets)
    if (crypto::equal_constant_time(mine.data(), t.data(), t.size())) return true;
  return false;
}

// n bytes from the link, by `deadline` (max: as long as it takes). False when it broke or stalled.
bool read_exact(proto::Transport& t, void* buf, size_t n, Clock::time_point deadline = Clock::time_point::max()) {
  std::string why;
  return proto::read_exact(t, buf, n, deadline, &why) == proto::ReadResult::kOk;
}

// One link's reading thread: runs TLS when the session does, checks the ticket, then files each
// chunk under its copy.
void serve_link(int fd) {
  const std::string from = net::peer_name(fd);
  set_link_liveness(fd);
  constexpr auto kOpening = std::chrono::seconds(10);  // for the TLS handshake and the ticket
  const auto deadline = Clock::now() + kOpening;
  std::unique_ptr<proto::Transport> t;
  if (g_in.tls) {
    net::set_recv_timeout(fd, static_cast<int>(kOpening.count()));
    uint32_t magic = 0;
    proto::TlsPreamble pre;
    std::string why = "it did not open with rgpu's TLS preamble";
    std::unique_ptr<proto::TlsTransport> secure;
    if (net::read_full(fd, &magic, sizeof magic) == sizeof magic && magic == proto::kTlsPreambleMagic &&
        proto::read_tls_preamble_rest(fd, &pre, deadline))
      secure = proto::tls_accept(g_in.tls, fd, true, deadline, &why, false);
    if (!secure) {
      log::warn("a copy link from %s failed its TLS opening (%s); closed", from.c_str(), why.c_str());
      ::close(fd);
      return;
    }
    t = std::move(secure);
  } else {
    t = proto::socket_transport(fd);
  }
  uint32_t magic = 0;
  PeerTicket ticket{};
  if (!read_exact(*t, &magic, sizeof magic, deadline) || magic != proto::kPeerLinkMagic ||
      !read_exact(*t, ticket.data(), ticket.size(), deadline) || !known_ticket(ticket)) {
    log::warn("a copy link from %s did not present a ticket this session handed out; closed", from.c_str());
    return;
  }
  net::set_buffers(fd, 8 << 20);
  log::info("copy link from server %s open%s", from.c_str(), g_in.tls ? " (TLS)" : "");
  uint64_t link;
  {
    std::lock_guard<std::mutex> lock(g_in.mu);
    link = ++g_in.links;
  }
  for (;;) {
    uint64_t copy = 0;
    uint32_t len = 0;
    if (!read_exact(*t, &copy, sizeof copy) || !read_exact(*t, &len, sizeof len)) break;
    if (len == proto::kPeerChunkFailed) {
      int32_t rc = 0;
      if (!read_exact(*t, &rc, sizeof rc)) break;
      std::lock_guard<std::mutex> lock(g_in.mu);
      g_in.copies[copy].failed = rc ? rc : CUDA_ERROR_UNKNOWN;
      g_in.cv.notify_all();
      continue;
    }
    if (len == proto::kPeerChunkPending) {  // A has the copy and waits for its stream
      std::lock_guard<std::mutex> lock(g_in.mu);
      g_in.copies[copy].link = link;
      g_in.cv.notify_all();
      continue;
    }
    if (len == 0 || len > proto::kPeerChunk) {
      log::warn("copy link from %s sent a malformed chunk (%u bytes); closed", from.c_str(), len);
      break;
    }
    std::vector<uint8_t> chunk(len);
    if (!read_exact(*t, chunk.data(), len)) break;
    std::lock_guard<std::mutex> lock(g_in.mu);
    Arrived& c = g_in.copies[copy];
    c.chunks.push_back(std::move(chunk));
    c.link = link;
    g_in.cv.notify_all();
  }
  log::info("copy link from server %s closed", from.c_str());
  // The copies whose bytes were coming on this link get no more: a receive that has not had them
  // all fails now instead of waiting out chunk_wait() (A sends a copy on one link, and tells a copy
  // that broke as failed on a new one).
  std::lock_guard<std::mutex> lock(g_in.mu);
  for (auto& [id, c] : g_in.copies)
    if (c.link == link) c.link_ended = true;
  g_in.cv.notify_all();
}

void accept_links(int listen_fd) {
  for (;;) {
    int fd = accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) {
      if (errno == EINTR || errno == ECONNABORTED) continue;
      return;
    }
    std::thread(serve_link, fd).detach();
  }
}

// Opens the link listener (once). False with *why when it cannot be.
bool open_listener(std::string* why) {
  if (g_in.listen_fd >= 0) return true;
  int fd = net::listen_tcp(net::Address{g_in.host, 0}, why);
  if (fd < 0) return false;
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len);
  g_in.port = ntohs(a.ss_family == AF_INET6 ? reinterpret_cast<sockaddr_in6*>(&a)->sin6_port
                                            : reinterpret_cast<sockaddr_in*>(&a)->sin_port);
  g_in.listen_fd = fd;
  std::thread(accept_links, fd).detach();
  return true;
}

// A new link to B at addr, opened with ticket: over TLS verifying B's certificate by
// `fingerprint`, or plain TCP when that is empty. nullptr with *why when it cannot be.
std::shared_ptr<Link> dial(const net::Address& addr, const PeerTicket& ticket, const std::string& fingerprint,
                           std::string* why) {
  auto fresh = std::make_shared<Link>();
  int fd = net::connect_tcp(addr, why, 10000);
  if (fd < 0) return nullptr;
  set_link_liveness(fd);
  net::set_buffers(fd, 8 << 20);
  if (!fingerprint.empty()) {
    proto::TlsClientConfig config;
    config.fingerprint = fingerprint;
    if (!(fresh->tls = proto::tls_client_context(config, why))) {
      ::close(fd);
      return nullptr;
    }
    proto::TlsFailure failure;
    fresh->t = proto::tls_connect(fresh->tls, fd, true, addr.host, proto::kTlsNew, proto::SessionId{},
                                  "rgpu-server at " + addr.str(), proto::Clock::now() + std::chrono::seconds(10), why,
                                  &failure);
    if (!fresh->t) {
      ::close(fd);
      return nullptr;
    }
  } else {
    fresh->t = proto::socket_transport(fd);
  }
  fresh->fd = fd;
  iovec hello[2] = {{const_cast<uint32_t*>(&proto::kPeerLinkMagic), sizeof(uint32_t)},
                    {const_cast<uint8_t*>(ticket.data()), ticket.size()}};
  if (!fresh->t->write(hello, 2)) {
    *why = "the server closed the link at once";
    return nullptr;
  }
  return fresh;
}

// Whether B has ended a kept link: B writes nothing on a link (over TLS, only TLS's own records),
// so the peer hanging up or resetting is the only news the socket can have. Bytes written to a
// link B has closed would be lost without an error (the kernel takes them), so this is checked
// before each copy.
bool hung_up(const Link& l) {
  pollfd p{l.fd, POLLRDHUP, 0};
  return ::poll(&p, 1, 0) > 0 && (p.revents & (POLLRDHUP | POLLHUP | POLLERR));
}

// The link for a copy to B at addr: the one kept, unless B has hung up on it, else a new one.
// *dialled says whether this dialled (a copy dials at most once).
std::shared_ptr<Link> link_for(const net::Address& addr, const PeerTicket& ticket, const std::string& fingerprint,
                               bool* dialled, std::string* why) {
  std::lock_guard<std::mutex> lock(g_links_mu);
  std::shared_ptr<Link>& l = g_links[addr.str()];
  if (l && !hung_up(*l)) return l;
  if (l) log::info("the copy link to %s was closed by the other end; dialling it again", addr.str().c_str());
  l = nullptr;
  *dialled = true;
  return l = dial(addr, ticket, fingerprint, why);
}

// Forgets link l to addr (it broke), unless another copy has already replaced it.
void drop(const net::Address& addr, const std::shared_ptr<Link>& l) {
  std::lock_guard<std::mutex> lock(g_links_mu);
  auto it = g_links.find(addr.str());
  if (it != g_links.end() && it->second == l) g_links.erase(it);
}

// One message on the link: u64 copy id, u32 length (a chunk's, or kPeerChunkFailed /
// kPeerChunkPending), then `n` bytes of body.
bool send_on(Link& l, uint64_t copy, uint32_t len, const void* body, size_t n) {
  std::lock_guard<std::mutex> lock(l.mu);
  iovec iov[3] = {{&copy, sizeof copy}, {&len, sizeof len}, {const_cast<void*>(body), n}};
  return l.t->write(iov, n ? 3 : 2);
}

bool send_chunk(Link& l, uint64_t copy, const void* data, uint32_t len) { return send_on(l, copy, len, data, len); }

// Names the copy on the link before A waits for its stream.
bool send_pending(Link& l, uint64_t copy) { return send_on(l, copy, proto::kPeerChunkPending, nullptr, 0); }

bool send_failure(Link& l, uint64_t copy, int32_t rc) {
  return send_on(l, copy, proto::kPeerChunkFailed, &rc, sizeof rc);
}

// Makes the context of device pointer p current on this thread, and waits for the stream's work
// (the context's, when has_stream is false) to finish. Returns the first error.
CUresult settle(Dispatch& d, CUdeviceptr p, bool has_stream, uint64_t stream_id, CUcontext* pushed) {
  CUcontext ctx = nullptr;
  if (d.drv.cuPointerGetAttribute(&ctx, CU_POINTER_ATTRIBUTE_CONTEXT, p) == CUDA_SUCCESS && ctx &&
      d.drv.cuCtxPushCurrent_v2(ctx) == CUDA_SUCCESS)
    *pushed = ctx;
  if (!has_stream) return d.drv.cuCtxSynchronize();
  CUstream s{};
  if (!d.handles.get(stream_id, &s)) return CUDA_ERROR_INVALID_HANDLE;
  return d.drv.cuStreamSynchronize(s);
}

void unsettle(Dispatch& d, CUcontext pushed) {
  CUcontext ignored;
  if (pushed) d.drv.cuCtxPopCurrent_v2(&ignored);
}

}  // namespace

void peer_copy_setup(int client_fd, std::shared_ptr<proto::TlsContext> tls) {
  sockaddr_storage a{};
  socklen_t len = sizeof a;
  char host[INET6_ADDRSTRLEN] = "127.0.0.1";
  if (getsockname(client_fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) {
    if (a.ss_family == AF_INET6)
      inet_ntop(AF_INET6, &reinterpret_cast<sockaddr_in6*>(&a)->sin6_addr, host, sizeof host);
    else if (a.ss_family == AF_INET)
      inet_ntop(AF_INET, &reinterpret_cast<sockaddr_in*>(&a)->sin_addr, host, sizeof host);
  }
  g_in.host = host;
  g_in.tls = std::move(tls);
}

// Outside a session (the dispatch fuzzer) nothing is listened for, dialled or waited for.
static bool in_session() { return !g_in.host.empty(); }

void peer_ticket(Dispatch& d) {
  if (!in_session()) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  std::string why;
  std::lock_guard<std::mutex> lock(g_in.mu);
  if (!open_listener(&why)) {
    log::warn("cannot listen for copies from other servers (%s); such copies stage through the client", why.c_str());
    return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  }
  PeerTicket t;
  crypto::random_bytes(t.data(), t.size());
  g_in.tickets.push_back(t);
  d.reply.put<int32_t>(CUDA_SUCCESS);
  d.reply.put<uint16_t>(g_in.port);
  d.reply.append(t.data(), t.size());
  d.reply.put_str(g_in.tls ? proto::tls_fingerprint(*g_in.tls) : std::string());
}

// Fails a copy: the client gets rc and why (the reply's text, protocol/messages.h kOpPeerSend),
// and the server's log says it too.
static void refuse_send(Dispatch& d, CUresult rc, const std::string& why) {
  log::warn("%s", why.c_str());
  d.reply.put<int32_t>(rc);
  d.reply.put_str(why.substr(0, proto::kMaxPeerSendError));
}

void peer_send(Dispatch& d) {
  proto::wire::PeerSend a;
  if (!proto::wire::read_peer_send(d.args, &a)) return;
  if (!in_session()) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  const net::Address to{a.host, a.port};
  // What to check, said only when the copy fails.
  auto check = [&] {
    return "check that the destination's rgpu-server session is still running and that this server (" + g_in.host +
           ") can reach " + to.str() + " over TCP (firewalls, routes)";
  };
  std::string why;
  bool dialled = false;
  std::shared_ptr<Link> link = link_for(to, a.ticket, a.fingerprint, &dialled, &why);
  if (!link)
    return refuse_send(d, CUDA_ERROR_PEER_ACCESS_UNSUPPORTED,
                       "a copy to the server at " + to.str() + " could not dial its copy link: " + why + "; " + check());
  // B hears of the copy before the wait for the stream, which may be long.
  bool broke = !send_pending(*link, a.copy);
  CUcontext pushed = nullptr;
  CUresult rc = broke ? CUDA_ERROR_PEER_ACCESS_UNSUPPORTED : settle(d, a.src, a.has_stream, a.stream, &pushed);
  std::vector<uint8_t> buf(static_cast<size_t>(std::min<uint64_t>(a.n, proto::kPeerChunk)));
  for (uint64_t off = 0; rc == CUDA_SUCCESS && off < a.n;) {
    const uint32_t len = static_cast<uint32_t>(std::min<uint64_t>(a.n - off, proto::kPeerChunk));
    rc = d.drv.cuMemcpyDtoH_v2(buf.data(), a.src + off, len);
    if (rc != CUDA_SUCCESS) break;
    if (!send_chunk(*link, a.copy, buf.data(), len)) {
      broke = true;
      rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
      break;
    }
    off += len;
  }
  unsettle(d, pushed);
  if (rc == CUDA_SUCCESS) return d.reply.put<int32_t>(rc);
  if (!broke) {
    send_failure(*link, a.copy, rc);  // B's receive ends with rc, not waiting for bytes
    return d.reply.put<int32_t>(rc);
  }
  // The link broke mid-copy: B may hold part of the copy and is waiting for the rest. A new link
  // (if this copy has not dialled yet) tells it the copy failed, so it does not wait in vain; the
  // next copy dials again itself if this cannot.
  drop(to, link);
  std::string told = "the destination was told";
  link = dialled ? nullptr : link_for(to, a.ticket, a.fingerprint, &dialled, &why);
  if (!link || !send_failure(*link, a.copy, rc))
    told = "the destination could not be told and fails it when its wait for the bytes runs out";
  return refuse_send(d, rc,
                     "the copy link to the server at " + to.str() + " broke during a copy; the copy failed (" + told +
                         ") and the next copy dials again; if this repeats, " + check());
}

void peer_receive(Dispatch& d) {
  proto::wire::PeerReceive a;
  if (!proto::wire::read_peer_receive(d.args, &a)) return;
  if (!in_session()) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  CUcontext pushed = nullptr;
  CUresult rc = settle(d, a.dst, a.has_stream, a.stream, &pushed);
  // Every chunk of the copy is taken, even after a failure, so none is left behind.
  for (uint64_t off = 0; off < a.n;) {
    std::vector<uint8_t> chunk;
    {
      std::unique_lock<std::mutex> lock(g_in.mu);
      Arrived& c = g_in.copies[a.copy];
      auto news = [&] { return !c.chunks.empty() || c.failed || c.link_ended; };
      bool came = g_in.cv.wait_for(lock, chunk_wait(), news);
      // A has named the copy on a link that lives (keepalive watches it): it is waiting for its
      // stream's earlier work, however long that takes, or sending.
      while (!came && c.link) came = g_in.cv.wait_for(lock, chunk_wait(), news);
      if (!came) {
        log::warn("a copy from another server did not come (%llu of %llu bytes in %lld s: its source server never "
                  "named it on a link); failing it",
                  static_cast<unsigned long long>(off), static_cast<unsigned long long>(a.n),
                  static_cast<long long>(chunk_wait().count()));
        if (rc == CUDA_SUCCESS) rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
        break;
      }
      if (c.chunks.empty() && c.failed) {
        if (rc == CUDA_SUCCESS) rc = static_cast<CUresult>(c.failed);
        break;
      }
      if (c.chunks.empty()) {
        log::warn("the link a copy from another server came on ended after %llu of its %llu bytes (the source "
                  "server's session ended, or the network between the servers failed); failing it",
                  static_cast<unsigned long long>(off), static_cast<unsigned long long>(a.n));
        if (rc == CUDA_SUCCESS) rc = CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
        break;
      }
      chunk = std::move(c.chunks.front());
      c.chunks.pop_front();
    }
    if (chunk.size() > a.n - off) {
      rc = CUDA_ERROR_INVALID_VALUE;
      break;
    }
    if (rc == CUDA_SUCCESS) rc = d.drv.cuMemcpyHtoD_v2(a.dst + off, chunk.data(), chunk.size());
    off += chunk.size();
  }
  {
    std::lock_guard<std::mutex> lock(g_in.mu);
    g_in.copies.erase(a.copy);
  }
  unsettle(d, pushed);
  d.reply.put<int32_t>(rc);
}

// B's receive of copy a.copy ends with a.result (unless A has told it already).
static void cancel(const proto::wire::PeerCancel& a) {
  std::lock_guard<std::mutex> lock(g_in.mu);
  Arrived& c = g_in.copies[a.copy];
  if (!c.failed) c.failed = a.result ? a.result : CUDA_ERROR_PEER_ACCESS_UNSUPPORTED;
  g_in.cv.notify_all();
}

bool peer_cancel(const uint8_t* payload, size_t n) {
  Reader r(payload, n);
  proto::wire::PeerCancel a;
  if (!proto::wire::read_peer_cancel(r, &a)) return false;
  cancel(a);
  return true;
}

void peer_cancel(Dispatch& d) {
  proto::wire::PeerCancel a;
  if (!proto::wire::read_peer_cancel(d.args, &a)) return;
  if (!in_session()) return d.reply.put<int32_t>(CUDA_ERROR_NOT_SUPPORTED);
  cancel(a);
  d.reply.put<int32_t>(CUDA_SUCCESS);
}

}  // namespace rgpu::server::handlers
