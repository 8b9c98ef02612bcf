// libfakenccl.so: the NCCL that rgpu-server's sessions load with --driver fake, so CI runs rgpu's
// NCCL forwarding (client/nccl/ → server/nccl/) end to end without a GPU. It answers as NCCL 2.28
// does for what rgpu forwards: communicators (unique id, init, init-all, split, finalize,
// destroy, abort, async errors), all-reduce, broadcast, reduce, all-gather, reduce-scatter,
// all-to-all, send/recv, groups and pre-multiplied sums, on fakecuda's device memory.
//
// Ranks are in different processes (a session process per client, on one server or several), so
// they talk over TCP, as NCCL's socket transport would: the unique id holds the address of a
// rendezvous socket that the process calling ncclGetUniqueId opens (NCCL's bootstrap root); each
// rank tells it where it listens, gets every rank's address back, and connects to every other rank
// (a full mesh, one socket per pair, 127.0.0.1 only: a test instrument). A reader thread per peer
// drains its socket into a queue, so a rank's sends never wait for the peer to post its receive.
//
// Work runs on the caller's stream as a host function (cuLaunchHostFunc), in stream order with
// the rest of the stream's work, as NCCL's kernels do. A group's calls run as one host function
// per stream: every send first, then every receive, so matched send/recv pairs in a group never
// deadlock whatever their order. Reductions go over the ranks in rank order, each step rounded to
// the element type (halves and bfloat16s through float), so every rank gets the same bytes; the
// real NCCL's order (rings, trees) differs, so floating-point results can differ from it in the
// last bits (the tests use values whose sums are exact). Avg divides the sum by the rank count
// (integers: truncating).
//
// Not implemented (refused with ncclInvalidUsage and a line on stderr): fp8 reductions, buffer
// registration, windows, device communicators, shrink, ncclMemAlloc, ncclGroupSimulateEnd.
#include <arpa/inet.h>
#include <cuda.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "protocol/nccl.h"

extern "C" void* fakecuda_device_bytes(CUdeviceptr p, size_t n);

#define NCCL_API extern "C" __attribute__((visibility("default")))

namespace {

constexpr char kIdMagic[8] = {'r', 'g', 'p', 'u', 'f', 'n', 'c', 'l'};
// How long a rank waits for a peer's data or a rendezvous before it calls the peer lost.
constexpr auto kPeerTimeout = std::chrono::seconds(60);

thread_local std::string t_last_error;

ncclResult_t fail(ncclResult_t rc, const std::string& why) {
  t_last_error = why;
  std::fprintf(stderr, "fake NCCL: %s\n", why.c_str());
  return rc;
}

// ---------- sockets ----------

bool write_all(int fd, const void* p, size_t n) {
  auto* b = static_cast<const uint8_t*>(p);
  while (n) {
    ssize_t k = send(fd, b, n, MSG_NOSIGNAL);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return false;
    }
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

bool read_all(int fd, void* p, size_t n) {
  auto* b = static_cast<uint8_t*>(p);
  while (n) {
    ssize_t k = recv(fd, b, n, 0);
    if (k <= 0) {
      if (k < 0 && errno == EINTR) continue;
      return false;
    }
    b += k;
    n -= static_cast<size_t>(k);
  }
  return true;
}

// A listening socket on 127.0.0.1 at a free port; *port gets it.
int listen_loopback(uint16_t* port) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 64) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

int dial(uint32_t ip, uint16_t port) {
  const auto until = std::chrono::steady_clock::now() + kPeerTimeout;
  for (;;) {
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) return -1;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = ip;
    a.sin_port = htons(port);
    if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) == 0) {
      int one = 1;
      setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      return fd;
    }
    close(fd);
    if (std::chrono::steady_clock::now() > until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
}

int accept_within(int lfd) {
  pollfd p{lfd, POLLIN, 0};
  if (poll(&p, 1, static_cast<int>(std::chrono::milliseconds(kPeerTimeout).count())) != 1) return -1;
  int fd = accept4(lfd, nullptr, nullptr, SOCK_CLOEXEC);
  if (fd >= 0) {
    int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  }
  return fd;
}

// ---------- the unique id ----------

struct Id {
  char magic[8];
  uint32_t ip;  // network order
  uint16_t port;
  uint16_t reserved;
  uint64_t nonce;  // tells one id's ranks from another's
};
static_assert(sizeof(Id) <= NCCL_UNIQUE_ID_BYTES);

bool parse_id(const ncclUniqueId& u, Id* out) {
  std::memcpy(out, u.internal, sizeof *out);
  return std::memcmp(out->magic, kIdMagic, sizeof kIdMagic) == 0;
}

struct Hello {  // a rank to the root, and a rank to a peer (rank, nonce)
  uint64_t nonce;
  int32_t rank, nranks;
  uint32_t ip;
  uint16_t port, reserved;
};

// The rendezvous (NCCL's bootstrap root): collects every rank's address, sends all of them back.
void root_loop(int lfd, uint64_t nonce) {
  std::vector<int> fds;
  std::vector<Hello> hellos;
  int nranks = -1;
  while (nranks < 0 || static_cast<int>(fds.size()) < nranks) {
    int fd = accept_within(lfd);
    if (fd < 0) break;
    Hello h;
    if (!read_all(fd, &h, sizeof h) || h.nonce != nonce || h.nranks < 1 || (nranks >= 0 && h.nranks != nranks)) {
      close(fd);
      continue;
    }
    nranks = h.nranks;
    fds.push_back(fd);
    hellos.push_back(h);
  }
  if (nranks > 0 && static_cast<int>(fds.size()) == nranks) {
    std::vector<Hello> table(static_cast<size_t>(nranks));
    for (const Hello& h : hellos)
      if (h.rank >= 0 && h.rank < nranks) table[static_cast<size_t>(h.rank)] = h;
    for (int fd : fds) write_all(fd, table.data(), table.size() * sizeof(Hello));
  }
  for (int fd : fds) close(fd);
  close(lfd);
}

ncclResult_t make_id(ncclUniqueId* out) {
  uint16_t port = 0;
  int lfd = listen_loopback(&port);
  if (lfd < 0) return fail(ncclSystemError, std::string("cannot open the rendezvous socket: ") + std::strerror(errno));
  Id id{};
  std::memcpy(id.magic, kIdMagic, sizeof kIdMagic);
  id.ip = htonl(INADDR_LOOPBACK);
  id.port = port;
  id.nonce = std::random_device{}() * 0x100000001ull ^ static_cast<uint64_t>(getpid()) << 20 ^ port;
  std::memset(out->internal, 0, sizeof out->internal);
  std::memcpy(out->internal, &id, sizeof id);
  std::thread(root_loop, lfd, id.nonce).detach();
  return ncclSuccess;
}

// ---------- communicators ----------

// One peer's link: a socket and the messages read from it (the rank's own "peer" has no socket:
// sends to self go straight into its queue).
struct Peer {
  int fd = -1;
  std::thread reader;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::vector<uint8_t>> inbox;
  bool closed = false;
  std::mutex send_mu;
};

}  // namespace

struct ncclComm {
  int nranks = 0, rank = 0, device = 0;
  std::vector<std::unique_ptr<Peer>> peers;
  std::atomic<int> async_error{ncclSuccess};
  std::mutex mu;
  std::condition_variable idle_cv;
  int pending = 0;  // host functions queued and not finished
  std::map<int, std::pair<ncclDataType_t, std::vector<uint8_t>>> premul;  // op -> (type, host scalar or 8-byte device address)
  std::map<int, bool> premul_on_device;
  int next_op = ncclNumOps;
  bool initialized = false;
};

namespace {

void peer_reader(Peer* p) {
  for (;;) {
    uint64_t n = 0;
    std::vector<uint8_t> msg;
    bool ok = read_all(p->fd, &n, sizeof n);
    if (ok) {
      msg.resize(n);
      ok = read_all(p->fd, msg.data(), n);
    }
    std::lock_guard lk(p->mu);
    if (!ok) {
      p->closed = true;
      p->cv.notify_all();
      return;
    }
    p->inbox.push_back(std::move(msg));
    p->cv.notify_all();
  }
}

bool send_msg(ncclComm* c, int peer, const void* data, size_t n) {
  Peer* p = c->peers[static_cast<size_t>(peer)].get();
  if (peer == c->rank) {
    std::lock_guard lk(p->mu);
    p->inbox.emplace_back(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
    p->cv.notify_all();
    return true;
  }
  std::lock_guard lk(p->send_mu);
  uint64_t len = n;
  return write_all(p->fd, &len, sizeof len) && write_all(p->fd, data, n);
}

// The next message from peer, within kPeerTimeout.
bool recv_msg(ncclComm* c, int peer, std::vector<uint8_t>* out, std::string* why) {
  Peer* p = c->peers[static_cast<size_t>(peer)].get();
  std::unique_lock lk(p->mu);
  if (!p->cv.wait_for(lk, kPeerTimeout, [p] { return !p->inbox.empty() || p->closed; })) {
    *why = "timed out waiting for rank " + std::to_string(peer);
    return false;
  }
  if (p->inbox.empty()) {
    *why = "rank " + std::to_string(peer) + " closed its connection";
    return false;
  }
  *out = std::move(p->inbox.front());
  p->inbox.pop_front();
  return true;
}

ncclResult_t connect_ranks(ncclComm* c, const Id& id) {
  uint16_t my_port = 0;
  int lfd = listen_loopback(&my_port);
  if (lfd < 0) return fail(ncclSystemError, "cannot open a socket for peers");
  int root = dial(id.ip, id.port);
  Hello me{id.nonce, c->rank, c->nranks, htonl(INADDR_LOOPBACK), my_port, 0};
  std::vector<Hello> table(static_cast<size_t>(c->nranks));
  if (root < 0 || !write_all(root, &me, sizeof me) || !read_all(root, table.data(), table.size() * sizeof(Hello))) {
    if (root >= 0) close(root);
    close(lfd);
    return fail(ncclSystemError, "rendezvous with the unique id's root failed (was the id made by ncclGetUniqueId, "
                                 "and do all ranks agree on nranks?)");
  }
  close(root);
  c->peers.resize(static_cast<size_t>(c->nranks));
  for (auto& p : c->peers) p = std::make_unique<Peer>();
  // Lower ranks dial higher ones: rank r dials every rank below it and accepts every rank above.
  for (int j = 0; j < c->rank; ++j) {
    int fd = dial(table[static_cast<size_t>(j)].ip, table[static_cast<size_t>(j)].port);
    Hello h{id.nonce, c->rank, c->nranks, 0, 0, 0};
    if (fd < 0 || !write_all(fd, &h, sizeof h)) {
      close(lfd);
      return fail(ncclSystemError, "cannot connect to rank " + std::to_string(j));
    }
    c->peers[static_cast<size_t>(j)]->fd = fd;
  }
  for (int k = c->rank + 1; k < c->nranks; ++k) {
    int fd = accept_within(lfd);
    Hello h;
    if (fd < 0 || !read_all(fd, &h, sizeof h) || h.nonce != id.nonce || h.rank <= c->rank || h.rank >= c->nranks ||
        c->peers[static_cast<size_t>(h.rank)]->fd >= 0) {
      if (fd >= 0) close(fd);
      close(lfd);
      return fail(ncclSystemError, "a peer did not connect");
    }
    c->peers[static_cast<size_t>(h.rank)]->fd = fd;
  }
  close(lfd);
  for (int j = 0; j < c->nranks; ++j)
    if (j != c->rank) c->peers[static_cast<size_t>(j)]->reader = std::thread(peer_reader, c->peers[static_cast<size_t>(j)].get());
  c->initialized = true;
  return ncclSuccess;
}

void close_links(ncclComm* c) {
  for (auto& p : c->peers)
    if (p && p->fd >= 0) shutdown(p->fd, SHUT_RDWR);
  for (auto& p : c->peers) {
    if (!p) continue;
    if (p->reader.joinable()) p->reader.join();
    if (p->fd >= 0) close(p->fd);
  }
}

void wait_idle(ncclComm* c) {
  std::unique_lock lk(c->mu);
  c->idle_cv.wait(lk, [c] { return c->pending == 0; });
}

int current_device() {
  CUdevice d = 0;
  return cuCtxGetDevice(&d) == CUDA_SUCCESS ? d : 0;
}

// ---------- element types and reductions ----------

float half_to_float(uint16_t h) {
  const uint32_t sign = (h & 0x8000u) << 16, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  uint32_t bits;
  if (exp == 0) {
    if (man == 0) {
      bits = sign;
    } else {  // subnormal
      float f = std::ldexp(static_cast<float>(man), -24);
      return sign ? -f : f;
    }
  } else if (exp == 31) {
    bits = sign | 0x7f800000u | (man << 13);
  } else {
    bits = sign | ((exp + 112) << 23) | (man << 13);
  }
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_half(float f) {  // round to nearest even
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  const uint16_t sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00 | (abs > 0x7f800000u ? 0x200 : 0);  // inf, nan
  if (abs >= 0x477ff000u) return sign | 0x7c00;                                    // overflow
  if (abs < 0x38800000u) {                                                          // subnormal or zero
    float a;
    std::memcpy(&a, &abs, sizeof a);
    return sign | static_cast<uint16_t>(std::nearbyint(a * 16777216.0f));
  }
  uint32_t r = abs + 0xc8000fffu + ((abs >> 13) & 1);  // rebias and round
  return sign | static_cast<uint16_t>(r >> 13);
}

float bf16_to_float(uint16_t b) {
  uint32_t bits = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

uint16_t float_to_bf16(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof x);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40);  // nan
  x += 0x7fff + ((x >> 16) & 1);
  return static_cast<uint16_t>(x >> 16);
}

// acc = acc OP in, elementwise, for n elements of type T (as stored: halves as uint16_t).
template <class T, class Load, class Store>
void combine(int op, uint8_t* acc, const uint8_t* in, size_t n, Load load, Store store) {
  for (size_t i = 0; i < n; ++i) {
    T a, b;
    std::memcpy(&a, acc + i * sizeof(T), sizeof a);
    std::memcpy(&b, in + i * sizeof(T), sizeof b);
    auto x = load(a), y = load(b);
    decltype(x) r;
    switch (op) {
      case ncclProd: r = x * y; break;
      case ncclMax: r = std::max(x, y); break;
      case ncclMin: r = std::min(x, y); break;
      default: r = x + y; break;  // sum, avg, pre-multiplied sum
    }
    T out = store(r);
    std::memcpy(acc + i * sizeof(T), &out, sizeof out);
  }
}

template <class T, class Load, class Store>
void scale(uint8_t* buf, size_t n, double factor, bool divide, int nranks, Load load, Store store) {
  for (size_t i = 0; i < n; ++i) {
    T a;
    std::memcpy(&a, buf + i * sizeof(T), sizeof a);
    auto x = load(a);
    if (divide) {
      x = static_cast<decltype(x)>(x / static_cast<decltype(x)>(nranks));
    } else {
      x = static_cast<decltype(x)>(x * static_cast<decltype(x)>(factor));
    }
    T out = store(x);
    std::memcpy(buf + i * sizeof(T), &out, sizeof out);
  }
}

template <class F>
bool with_type(ncclDataType_t t, F&& f) {
  auto id = [](auto v) { return v; };
  switch (t) {
    case ncclInt8: f(int8_t{}, id, id); return true;
    case ncclUint8: f(uint8_t{}, id, id); return true;
    case ncclInt32: f(int32_t{}, id, id); return true;
    case ncclUint32: f(uint32_t{}, id, id); return true;
    case ncclInt64: f(int64_t{}, id, id); return true;
    case ncclUint64: f(uint64_t{}, id, id); return true;
    case ncclFloat32: f(float{}, id, id); return true;
    case ncclFloat64: f(double{}, id, id); return true;
    case ncclFloat16: f(uint16_t{}, half_to_float, float_to_half); return true;
    case ncclBfloat16: f(uint16_t{}, bf16_to_float, float_to_bf16); return true;
    default: return false;
  }
}

size_t type_size(ncclDataType_t t) {
  switch (t) {
    case ncclInt8: case ncclUint8: case ncclFloat8e4m3: case ncclFloat8e5m2: return 1;
    case ncclFloat16: case ncclBfloat16: return 2;
    case ncclInt32: case ncclUint32: case ncclFloat32: return 4;
    case ncclInt64: case ncclUint64: case ncclFloat64: return 8;
    default: return 0;
  }
}

// ---------- operations ----------

enum Kind { kAllReduce, kBroadcast, kReduce, kAllGather, kReduceScatter, kAlltoAll, kSend, kRecv };

struct Op {
  Kind kind;
  ncclComm* comm;
  CUdeviceptr send, recv;
  size_t count;
  ncclDataType_t type;
  int redop, root;
  CUstream stream;
  std::vector<uint8_t> mine;  // the send buffer, read in the send phase (collectives that reduce it)
};

uint8_t* bytes(CUdeviceptr p, size_t n) { return static_cast<uint8_t*>(fakecuda_device_bytes(p, n)); }

// Applies op's reduction of one rank's contribution `in` into acc (the first contribution is
// copied, pre-multiplied for a pre-multiplied sum).
void reduce_into(const Op& op, uint8_t* acc, const uint8_t* in, size_t n, bool first) {
  const size_t bytes_n = n * type_size(op.type);
  std::vector<uint8_t> tmp;
  if (op.redop >= ncclNumOps) {  // pre-multiplied sum: in × scalar, then sum
    tmp.assign(in, in + bytes_n);
    double factor = 0;
    auto& pm = op.comm->premul.at(op.redop);
    std::vector<uint8_t> scalar = pm.second;
    if (op.comm->premul_on_device[op.redop]) {
      CUdeviceptr at;
      std::memcpy(&at, scalar.data(), sizeof at);
      const uint8_t* s = bytes(at, type_size(op.type));
      scalar.assign(s ? s : scalar.data(), (s ? s : scalar.data()) + type_size(op.type));
    }
    with_type(op.type, [&](auto t, auto load, auto) {
      decltype(t) v;
      std::memcpy(&v, scalar.data(), sizeof v);
      factor = static_cast<double>(load(v));
    });
    with_type(op.type, [&](auto t, auto load, auto store) {
      scale<decltype(t)>(tmp.data(), n, factor, false, 0, load, store);
    });
    in = tmp.data();
  }
  if (first) {
    std::memcpy(acc, in, bytes_n);
    return;
  }
  with_type(op.type, [&](auto t, auto load, auto store) { combine<decltype(t)>(op.redop, acc, in, n, load, store); });
}

void finish_avg(const Op& op, uint8_t* acc, size_t n) {
  if (op.redop != ncclAvg) return;
  with_type(op.type, [&](auto t, auto load, auto store) {
    scale<decltype(t)>(acc, n, 0, true, op.comm->nranks, load, store);
  });
}

// The send phase: everything this op sends.
bool send_phase(Op& op, std::string* why) {
  ncclComm* c = op.comm;
  const size_t es = type_size(op.type), total = op.count * es;
  auto sendto = [&](int peer, const uint8_t* p, size_t n) {
    if (send_msg(c, peer, p, n)) return true;
    *why = "lost the connection to rank " + std::to_string(peer);
    return false;
  };
  const bool needs_send = op.kind != kRecv && !(op.kind == kBroadcast && c->rank != op.root);
  const size_t send_n = op.kind == kAlltoAll || op.kind == kReduceScatter ? total * c->nranks : total;
  const uint8_t* src = needs_send ? bytes(op.send, send_n) : nullptr;
  if (!needs_send) return true;
  if (!src) {
    *why = "the send buffer is not device memory of this process";
    return false;
  }
  switch (op.kind) {
    case kAllReduce:
    case kAllGather:
      op.mine.assign(src, src + total);
      for (int p = 0; p < c->nranks; ++p)
        if (p != c->rank && !sendto(p, src, total)) return false;
      return true;
    case kBroadcast:
      if (c->rank == op.root) {
        op.mine.assign(src, src + total);
        for (int p = 0; p < c->nranks; ++p)
          if (p != c->rank && !sendto(p, src, total)) return false;
      }
      return true;
    case kReduce:
      op.mine.assign(src, src + total);
      return c->rank == op.root || sendto(op.root, src, total);
    case kReduceScatter:
    case kAlltoAll:
      op.mine.assign(src + static_cast<size_t>(c->rank) * total, src + static_cast<size_t>(c->rank + 1) * total);
      for (int p = 0; p < c->nranks; ++p)
        if (p != c->rank && !sendto(p, src + static_cast<size_t>(p) * total, total)) return false;
      return true;
    case kSend:
      return sendto(op.root, src, total);
    case kRecv:
      return true;
  }
  return true;
}

// The receive phase: everything this op receives, and its result in the receive buffer.
bool recv_phase(Op& op, std::string* why) {
  ncclComm* c = op.comm;
  const size_t es = type_size(op.type), total = op.count * es;
  std::vector<uint8_t> msg;
  auto from = [&](int peer) {
    if (!recv_msg(c, peer, &msg, why)) return false;
    if (msg.size() == total) return true;
    *why = "rank " + std::to_string(peer) + " sent " + std::to_string(msg.size()) + " bytes where " +
           std::to_string(total) + " were expected (do the ranks' calls and counts match?)";
    return false;
  };
  const size_t out_n = op.kind == kAllGather || op.kind == kAlltoAll ? total * c->nranks : total;
  uint8_t* dst = nullptr;
  if (op.kind != kSend && !(op.kind == kReduce && c->rank != op.root)) {
    dst = bytes(op.recv, out_n);
    if (!dst && out_n) {
      *why = "the receive buffer is not device memory of this process";
      return false;
    }
  }
  switch (op.kind) {
    case kAllReduce:
    case kReduce:
    case kReduceScatter: {
      if (op.kind == kReduce && c->rank != op.root) return true;
      std::vector<uint8_t> acc(total);
      for (int p = 0; p < c->nranks; ++p) {
        const uint8_t* in = op.mine.data();
        if (p != c->rank) {
          if (!from(p)) return false;
          in = msg.data();
        }
        reduce_into(op, acc.data(), in, op.count, p == 0);
      }
      finish_avg(op, acc.data(), op.count);
      if (total) std::memcpy(dst, acc.data(), total);
      return true;
    }
    case kBroadcast:
      if (c->rank == op.root) {
        if (total) std::memmove(dst, op.mine.data(), total);
        return true;
      }
      if (!from(op.root)) return false;
      if (total) std::memcpy(dst, msg.data(), total);
      return true;
    case kAllGather:
    case kAlltoAll:
      for (int p = 0; p < c->nranks; ++p) {
        const uint8_t* in = op.mine.data();
        if (p != c->rank) {
          if (!from(p)) return false;
          in = msg.data();
        }
        if (total) std::memcpy(dst + static_cast<size_t>(p) * total, in, total);
      }
      return true;
    case kRecv:
      if (!from(op.root)) return false;
      if (total) std::memcpy(dst, msg.data(), total);
      return true;
    case kSend:
      return true;
  }
  return true;
}

// One host function's worth of operations (one stream's share of a group, or one call).
struct Task {
  std::vector<Op> ops;
};

void run_task(void* arg) {
  std::unique_ptr<Task> t(static_cast<Task*>(arg));
  std::string why;
  ncclComm* failed = nullptr;
  for (Op& op : t->ops)
    if (!failed && !send_phase(op, &why)) failed = op.comm;
  for (Op& op : t->ops)
    if (!failed && !recv_phase(op, &why)) failed = op.comm;
  if (failed) {
    int expected = ncclSuccess;
    failed->async_error.compare_exchange_strong(expected, ncclSystemError);
    std::fprintf(stderr, "fake NCCL: rank %d: %s\n", failed->rank, why.c_str());
  }
  for (Op& op : t->ops) {
    std::lock_guard lk(op.comm->mu);
    if (--op.comm->pending == 0) op.comm->idle_cv.notify_all();
  }
}

ncclResult_t launch(std::vector<Op> ops) {
  // One task per stream, keeping the calls' order within each.
  std::vector<std::pair<CUstream, Task*>> tasks;
  for (Op& op : ops) {
    auto it = std::find_if(tasks.begin(), tasks.end(), [&](auto& p) { return p.first == op.stream; });
    if (it == tasks.end()) {
      tasks.emplace_back(op.stream, new Task);
      it = tasks.end() - 1;
    }
    {
      std::lock_guard lk(op.comm->mu);
      ++op.comm->pending;
    }
    it->second->ops.push_back(std::move(op));
  }
  ncclResult_t rc = ncclSuccess;
  for (auto& [stream, task] : tasks) {
    if (CUresult r = cuLaunchHostFunc(stream, run_task, task)) {
      for (Op& op : task->ops) {
        std::lock_guard lk(op.comm->mu);
        if (--op.comm->pending == 0) op.comm->idle_cv.notify_all();
      }
      delete task;
      rc = fail(ncclUnhandledCudaError, "cannot queue on the stream (CUDA error " + std::to_string(r) + ")");
    }
  }
  return rc;
}

// Groups: calls between ncclGroupStart and the outermost ncclGroupEnd are kept and run there.
struct PendingInit {
  ncclComm* comm;
  Id id;
};
struct Group {
  int depth = 0;
  std::vector<Op> ops;
  std::vector<PendingInit> inits;
};
thread_local Group t_group;

ncclResult_t run_inits(std::vector<PendingInit>& inits) {
  std::vector<ncclResult_t> rcs(inits.size(), ncclSuccess);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < inits.size(); ++i)
    threads.emplace_back([&, i] { rcs[i] = connect_ranks(inits[i].comm, inits[i].id); });
  for (auto& t : threads) t.join();
  for (ncclResult_t rc : rcs)
    if (rc != ncclSuccess) return rc;
  return ncclSuccess;
}

ncclResult_t check_comm(ncclComm_t c, const char* call) {
  if (!c) return fail(ncclInvalidArgument, std::string(call) + ": comm is NULL");
  if (!c->initialized && t_group.depth == 0) return fail(ncclInvalidUsage, std::string(call) + ": comm is not initialized");
  return ncclSuccess;
}

ncclResult_t enqueue(Kind kind, const void* send, void* recv, size_t count, ncclDataType_t type, int redop, int root,
                     ncclComm_t comm, cudaStream_t stream, const char* call) {
  if (ncclResult_t r = check_comm(comm, call)) return r;
  const size_t es = type_size(type);
  if (es == 0) return fail(ncclInvalidArgument, std::string(call) + ": invalid datatype " + std::to_string(type));
  const bool reduces = kind == kAllReduce || kind == kReduce || kind == kReduceScatter;
  if (reduces && !(redop >= 0 && redop < ncclNumOps) && !comm->premul.count(redop))
    return fail(ncclInvalidArgument, std::string(call) + ": invalid reduction operation " + std::to_string(redop));
  if (reduces && (type == ncclFloat8e4m3 || type == ncclFloat8e5m2))
    return fail(ncclInvalidUsage, std::string(call) + ": the fake NCCL has no fp8 reductions");
  if ((kind == kBroadcast || kind == kReduce || kind == kSend || kind == kRecv) && (root < 0 || root >= comm->nranks))
    return fail(ncclInvalidArgument, std::string(call) + ": invalid root or peer " + std::to_string(root));
  // As NCCL's argument checks: the buffers must be device memory (not checked for empty calls).
  const size_t n = count * es, wide = n * static_cast<size_t>(comm->nranks);
  const size_t send_n = kind == kReduceScatter || kind == kAlltoAll ? wide : n;
  const size_t recv_n = kind == kAllGather || kind == kAlltoAll ? wide : n;
  const bool needs_send = kind != kRecv && !(kind == kBroadcast && comm->rank != root);
  const bool needs_recv = kind != kSend && !(kind == kReduce && comm->rank != root);
  if (count && needs_send && !fakecuda_device_bytes(reinterpret_cast<CUdeviceptr>(send), send_n))
    return fail(ncclInvalidArgument, std::string(call) + ": sendbuff is not a valid device pointer");
  if (count && needs_recv && !fakecuda_device_bytes(reinterpret_cast<CUdeviceptr>(recv), recv_n))
    return fail(ncclInvalidArgument, std::string(call) + ": recvbuff is not a valid device pointer");
  Op op{kind, comm, reinterpret_cast<CUdeviceptr>(send), reinterpret_cast<CUdeviceptr>(recv), count, type, redop, root,
        stream, {}};
  if (t_group.depth > 0) {
    t_group.ops.push_back(std::move(op));
    return ncclSuccess;
  }
  std::vector<Op> one;
  one.push_back(std::move(op));
  return launch(std::move(one));
}

ncclResult_t init_rank(ncclComm_t* out, int nranks, const ncclUniqueId& uid, int rank, int device) {
  if (!out) return fail(ncclInvalidArgument, "comm is NULL");
  Id id;
  if (!parse_id(uid, &id)) return fail(ncclInvalidArgument, "the unique id was not made by ncclGetUniqueId");
  if (nranks < 1 || rank < 0 || rank >= nranks) return fail(ncclInvalidArgument, "rank or nranks out of range");
  auto* c = new ncclComm;
  c->nranks = nranks;
  c->rank = rank;
  c->device = device;
  if (t_group.depth > 0) {
    t_group.inits.push_back({c, id});
    *out = c;
    return ncclSuccess;
  }
  if (ncclResult_t rc = connect_ranks(c, id)) {
    close_links(c);
    delete c;
    return rc;
  }
  *out = c;
  return ncclSuccess;
}

}  // namespace

NCCL_API ncclResult_t ncclGetVersion(int* version) {
  if (!version) return fail(ncclInvalidArgument, "version is NULL");
  *version = NCCL_VERSION_CODE;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGetUniqueId(ncclUniqueId* id) {
  if (!id) return fail(ncclInvalidArgument, "uniqueId is NULL");
  return make_id(id);
}

NCCL_API ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank) {
  return init_rank(comm, nranks, id, rank, current_device());
}

NCCL_API ncclResult_t ncclCommInitRankConfig(ncclComm_t* comm, int nranks, ncclUniqueId id, int rank,
                                             ncclConfig_t* config) {
  if (config && config->magic != NCCL_CONFIG_MAGIC) return fail(ncclInvalidArgument, "config is not initialized");
  return init_rank(comm, nranks, id, rank, current_device());  // blocking or not, the fake finishes here
}

NCCL_API ncclResult_t ncclCommInitRankScalable(ncclComm_t* comm, int nranks, int rank, int nId, ncclUniqueId* ids,
                                               ncclConfig_t*) {
  if (nId != 1 || !ids) return fail(ncclInvalidUsage, "the fake NCCL takes one unique id");
  return init_rank(comm, nranks, ids[0], rank, current_device());
}

NCCL_API ncclResult_t ncclCommInitAll(ncclComm_t* comms, int ndev, const int* devlist) {
  if (!comms || ndev < 1) return fail(ncclInvalidArgument, "comms is NULL or ndev < 1");
  ncclUniqueId uid;
  if (ncclResult_t rc = make_id(&uid)) return rc;
  Id id;
  parse_id(uid, &id);
  std::vector<PendingInit> inits;
  for (int i = 0; i < ndev; ++i) {
    auto* c = new ncclComm;
    c->nranks = ndev;
    c->rank = i;
    c->device = devlist ? devlist[i] : i;
    comms[i] = c;
    inits.push_back({c, id});
  }
  return run_inits(inits);
}

NCCL_API ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t*) {
  if (ncclResult_t r = check_comm(comm, "ncclCommSplit")) return r;
  if (!newcomm) return fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
  wait_idle(comm);  // the parent's links carry the exchange: nothing else may be reading them
  // Every rank's (color, key), in parent rank order.
  int32_t mine[2] = {color, key};
  std::vector<std::array<int32_t, 2>> all(static_cast<size_t>(comm->nranks));
  all[static_cast<size_t>(comm->rank)] = {color, key};
  for (int p = 0; p < comm->nranks; ++p)
    if (p != comm->rank && !send_msg(comm, p, mine, sizeof mine)) return fail(ncclSystemError, "ncclCommSplit: lost a peer");
  std::string why;
  for (int p = 0; p < comm->nranks; ++p) {
    if (p == comm->rank) continue;
    std::vector<uint8_t> m;
    if (!recv_msg(comm, p, &m, &why) || m.size() != sizeof mine) return fail(ncclSystemError, "ncclCommSplit: " + why);
    std::memcpy(all[static_cast<size_t>(p)].data(), m.data(), sizeof mine);
  }
  // The new communicator's ranks: same color, by key then parent rank.
  std::vector<int> members;
  for (int p = 0; p < comm->nranks; ++p)
    if (color != NCCL_SPLIT_NOCOLOR && all[static_cast<size_t>(p)][0] == color) members.push_back(p);
  std::stable_sort(members.begin(), members.end(),
                   [&](int a, int b) { return all[static_cast<size_t>(a)][1] < all[static_cast<size_t>(b)][1]; });
  if (color == NCCL_SPLIT_NOCOLOR) {
    *newcomm = nullptr;
    return ncclSuccess;
  }
  const int new_rank = static_cast<int>(std::find(members.begin(), members.end(), comm->rank) - members.begin());
  ncclUniqueId uid;
  if (new_rank == 0) {
    if (ncclResult_t rc = make_id(&uid)) return rc;
    for (size_t i = 1; i < members.size(); ++i)
      if (!send_msg(comm, members[i], uid.internal, sizeof uid.internal)) return fail(ncclSystemError, "ncclCommSplit: lost a peer");
  } else {
    std::vector<uint8_t> m;
    if (!recv_msg(comm, members[0], &m, &why) || m.size() != sizeof uid.internal)
      return fail(ncclSystemError, "ncclCommSplit: " + why);
    std::memcpy(uid.internal, m.data(), sizeof uid.internal);
  }
  return init_rank(newcomm, static_cast<int>(members.size()), uid, new_rank, comm->device);
}

NCCL_API ncclResult_t ncclCommShrink(ncclComm_t, int*, int, ncclComm_t*, ncclConfig_t*, int) {
  return fail(ncclInvalidUsage, "ncclCommShrink is not implemented by the fake NCCL");
}

NCCL_API ncclResult_t ncclCommFinalize(ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclCommFinalize")) return r;
  wait_idle(comm);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommDestroy(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  wait_idle(comm);
  close_links(comm);
  delete comm;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommAbort(ncclComm_t comm) {
  if (!comm) return ncclSuccess;
  close_links(comm);  // queued work waiting on a peer ends now, failing
  wait_idle(comm);
  delete comm;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommGetAsyncError(ncclComm_t comm, ncclResult_t* e) {
  if (!comm || !e) return fail(ncclInvalidArgument, "comm or asyncError is NULL");
  *e = static_cast<ncclResult_t>(comm->async_error.load());
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCount(const ncclComm_t comm, int* count) {
  if (!comm || !count) return fail(ncclInvalidArgument, "comm or count is NULL");
  *count = comm->nranks;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommCuDevice(const ncclComm_t comm, int* device) {
  if (!comm || !device) return fail(ncclInvalidArgument, "comm or device is NULL");
  *device = comm->device;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclCommUserRank(const ncclComm_t comm, int* rank) {
  if (!comm || !rank) return fail(ncclInvalidArgument, "comm or rank is NULL");
  *rank = comm->rank;
  return ncclSuccess;
}

NCCL_API const char* ncclGetErrorString(ncclResult_t rc) { return rgpu_nccl_error_string(rc); }

NCCL_API const char* ncclGetLastError(ncclComm_t) { return t_last_error.c_str(); }

NCCL_API ncclResult_t ncclRedOpCreatePreMulSum(ncclRedOp_t* op, void* scalar, ncclDataType_t type,
                                               ncclScalarResidence_t residence, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpCreatePreMulSum")) return r;
  const size_t es = type_size(type);
  if (!op || !scalar || es == 0 || type == ncclFloat8e4m3 || type == ncclFloat8e5m2)
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: bad op, scalar or datatype");
  std::vector<uint8_t> s;
  if (residence == ncclScalarHostImmediate) {
    s.assign(static_cast<uint8_t*>(scalar), static_cast<uint8_t*>(scalar) + es);
  } else if (residence == ncclScalarDevice) {
    CUdeviceptr at = reinterpret_cast<CUdeviceptr>(scalar);
    if (!fakecuda_device_bytes(at, es)) return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: scalar is not device memory");
    s.resize(sizeof at);
    std::memcpy(s.data(), &at, sizeof at);
  } else {
    return fail(ncclInvalidArgument, "ncclRedOpCreatePreMulSum: bad residence");
  }
  std::lock_guard lk(comm->mu);
  const int id = comm->next_op++;
  comm->premul[id] = {type, std::move(s)};
  comm->premul_on_device[id] = residence == ncclScalarDevice;
  *op = static_cast<ncclRedOp_t>(id);
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm) {
  if (ncclResult_t r = check_comm(comm, "ncclRedOpDestroy")) return r;
  std::lock_guard lk(comm->mu);
  if (!comm->premul.erase(op)) return fail(ncclInvalidArgument, "ncclRedOpDestroy: not a user-created op");
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclAllReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, ncclComm_t c,
                                    cudaStream_t st) {
  return enqueue(kAllReduce, s, r, n, t, op, -1, c, st, "ncclAllReduce");
}
NCCL_API ncclResult_t ncclBroadcast(const void* s, void* r, size_t n, ncclDataType_t t, int root, ncclComm_t c,
                                    cudaStream_t st) {
  return enqueue(kBroadcast, s, r, n, t, 0, root, c, st, "ncclBroadcast");
}
NCCL_API ncclResult_t ncclBcast(void* b, size_t n, ncclDataType_t t, int root, ncclComm_t c, cudaStream_t st) {
  return enqueue(kBroadcast, b, b, n, t, 0, root, c, st, "ncclBcast");
}
NCCL_API ncclResult_t ncclReduce(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op, int root,
                                 ncclComm_t c, cudaStream_t st) {
  return enqueue(kReduce, s, r, n, t, op, root, c, st, "ncclReduce");
}
NCCL_API ncclResult_t ncclAllGather(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return enqueue(kAllGather, s, r, n, t, 0, -1, c, st, "ncclAllGather");
}
NCCL_API ncclResult_t ncclReduceScatter(const void* s, void* r, size_t n, ncclDataType_t t, ncclRedOp_t op,
                                        ncclComm_t c, cudaStream_t st) {
  return enqueue(kReduceScatter, s, r, n, t, op, -1, c, st, "ncclReduceScatter");
}
NCCL_API ncclResult_t ncclAlltoAll(const void* s, void* r, size_t n, ncclDataType_t t, ncclComm_t c, cudaStream_t st) {
  return enqueue(kAlltoAll, s, r, n, t, 0, -1, c, st, "ncclAlltoAll");
}
NCCL_API ncclResult_t ncclSend(const void* s, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return enqueue(kSend, s, nullptr, n, t, 0, peer, c, st, "ncclSend");
}
NCCL_API ncclResult_t ncclRecv(void* r, size_t n, ncclDataType_t t, int peer, ncclComm_t c, cudaStream_t st) {
  return enqueue(kRecv, nullptr, r, n, t, 0, peer, c, st, "ncclRecv");
}

NCCL_API ncclResult_t ncclGroupStart(void) {
  ++t_group.depth;
  return ncclSuccess;
}

NCCL_API ncclResult_t ncclGroupEnd(void) {
  if (t_group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without ncclGroupStart");
  if (--t_group.depth > 0) return ncclSuccess;
  Group g = std::move(t_group);
  t_group = Group{};
  if (ncclResult_t rc = run_inits(g.inits)) return rc;
  return g.ops.empty() ? ncclSuccess : launch(std::move(g.ops));
}

NCCL_API ncclResult_t ncclGroupSimulateEnd(ncclSimInfo_t*) {
  return fail(ncclInvalidUsage, "ncclGroupSimulateEnd is not implemented by the fake NCCL");
}
NCCL_API ncclResult_t ncclCommRegister(const ncclComm_t, void*, size_t, void**) {
  return fail(ncclInvalidUsage, "ncclCommRegister is not implemented by the fake NCCL");
}
NCCL_API ncclResult_t ncclCommDeregister(const ncclComm_t, void*) {
  return fail(ncclInvalidUsage, "ncclCommDeregister is not implemented by the fake NCCL");
}
NCCL_API ncclResult_t ncclMemAlloc(void**, size_t) {
  return fail(ncclInvalidUsage, "ncclMemAlloc is not implemented by the fake NCCL");
}
NCCL_API ncclResult_t ncclMemFree(void*) { return fail(ncclInvalidUsage, "ncclMemFree is not implemented by the fake NCCL"); }
