// Implementation of protocol/session_dir.h.
#include "protocol/session_dir.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstring>

#include "common/env.h"
#include "common/log.h"
#include "common/wire.h"
#include "protocol/drain.h"

namespace rgpu::proto {
namespace {

// The encoded ResumeHello that travels with the fd (channel.cpp's encode: 16 + 32 bytes), or for a
// TLS connection the session id alone.
constexpr size_t kHelloBytes = 48;
constexpr size_t kTlsHandOverBytes = 16;

bool make_dirs(const std::string& path, std::string* err) {
  for (size_t i = 1; i <= path.size(); ++i) {
    if (i != path.size() && path[i] != '/') continue;
    std::string part = path.substr(0, i);
    if (mkdir(part.c_str(), 0700) != 0 && errno != EEXIST) {
      *err = log::format("cannot make the session directory %s: %s", part.c_str(), std::strerror(errno));
      return false;
    }
  }
  return true;
}

bool fill_addr(const std::string& path, sockaddr_un* a, std::string* err) {
  *a = {};
  a->sun_family = AF_UNIX;
  if (path.size() >= sizeof a->sun_path) {
    *err = log::format("the session socket path %s is longer than a Unix socket allows (%zu bytes); give a shorter "
                       "--runtime-dir",
                       path.c_str(), sizeof a->sun_path - 1);
    return false;
  }
  std::memcpy(a->sun_path, path.c_str(), path.size());
  return true;
}

// -1 with errno when nothing listens at path.
int connect_unix(const std::string& path) {
  sockaddr_un a;
  std::string err;
  if (!fill_addr(path, &a, &err)) {
    errno = ENAMETOOLONG;
    return -1;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  if (connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0) {
    int e = errno;
    ::close(fd);
    errno = e;
    return -1;
  }
  return fd;
}

// One message of a Unix socket with room for one file descriptor (SCM_RIGHTS) beside its bytes.
struct FdMessage {
  FdMessage(void* buf, size_t n) : iov{buf, n} {
    m.msg_iov = &iov;
    m.msg_iovlen = 1;
    m.msg_control = control;
    m.msg_controllen = sizeof control;
  }
  FdMessage(const FdMessage&) = delete;
  FdMessage& operator=(const FdMessage&) = delete;
  iovec iov;
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(int))] = {};
  msghdr m{};
};

bool is_session_name(const char* name) {
  size_t n = std::strlen(name);
  if (n != 32) return false;
  for (size_t i = 0; i < n; ++i)
    if (!std::isxdigit(static_cast<unsigned char>(name[i]))) return false;
  return true;
}

}  // namespace

std::string default_runtime_dir() {
  const std::string& xdg = env::get().xdg_runtime_dir;
  if (!xdg.empty()) return xdg + "/rgpu";
  if (mkdir("/run/rgpu", 0700) == 0 || (errno == EEXIST && access("/run/rgpu", W_OK) == 0)) return "/run/rgpu";
  return log::format("/tmp/rgpu-%u", static_cast<unsigned>(getuid()));
}

std::string session_hex(const SessionId& id) {
  static const char* kHex = "0123456789abcdef";
  std::string s;
  for (uint8_t b : id) {
    s += kHex[b >> 4];
    s += kHex[b & 15];
  }
  return s;
}

bool prepare_session_dir(const std::string& runtime_dir, uint16_t port, std::string* dir, std::string* err) {
  *dir = runtime_dir + "/" + std::to_string(port);
  if (!make_dirs(*dir, err)) return false;
  struct stat st {};
  if (stat(dir->c_str(), &st) != 0 || !S_ISDIR(st.st_mode)) {
    *err = log::format("the session directory %s is not a directory", dir->c_str());
    return false;
  }
  if (st.st_uid != getuid()) {
    *err = log::format("the session directory %s belongs to another user (uid %u); give a --runtime-dir of your own",
                       dir->c_str(), static_cast<unsigned>(st.st_uid));
    return false;
  }
  chmod(dir->c_str(), 0700);
  int n = clean_stale(*dir);
  if (n) log::info("removed %d stale session socket%s from %s (their sessions had ended)", n, n == 1 ? "" : "s", dir->c_str());
  return true;
}

int clean_stale(const std::string& dir) {
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (!is_session_name(e->d_name)) continue;
    std::string path = dir + "/" + e->d_name;
    int fd = connect_unix(path);
    if (fd >= 0) {
      ::close(fd);  // a live session: the door sees a connection that sends nothing, and drops it
      continue;
    }
    if (errno == ECONNREFUSED || errno == ENOENT) {
      if (unlink(path.c_str()) == 0) ++removed;
    }
  }
  closedir(d);
  return removed;
}

namespace {

// Sends fd with `message` to the door of `session`.
bool pass_fd(const std::string& dir, int fd, const SessionId& session, const std::vector<uint8_t>& message,
             std::string* why) {
  std::string path = dir + "/" + session_hex(session);
  int door = connect_unix(path);
  if (door < 0) {
    if (errno == ECONNREFUSED) unlink(path.c_str());  // its process is gone
    *why = errno == ENOENT || errno == ECONNREFUSED
               ? "this server holds no such session (it ended: its grace passed, or the server host restarted)"
               : log::format("cannot reach the session's process (%s)", std::strerror(errno));
    return false;
  }
  FdMessage msg(const_cast<uint8_t*>(message.data()), message.size());
  cmsghdr* c = CMSG_FIRSTHDR(&msg.m);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_RIGHTS;
  c->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(c), &fd, sizeof fd);
  ssize_t sent;
  do sent = sendmsg(door, &msg.m, MSG_NOSIGNAL);
  while (sent < 0 && errno == EINTR);
  int e = errno;
  ::close(door);
  if (sent != static_cast<ssize_t>(message.size())) {
    *why = log::format("handing the connection to the session's process failed (%s)", std::strerror(e));
    return false;
  }
  return true;
}

}  // namespace

bool hand_over(const std::string& dir, int fd, const ResumeHello& hello, std::string* why) {
  Writer w;
  encode(hello, &w);
  return pass_fd(dir, fd, hello.session, w.buf(), why);
}

bool hand_over_tls(const std::string& dir, int fd, const SessionId& session, std::string* why) {
  // The session id alone (kTlsHandOverBytes): the door tells it from a ResumeHello by its size.
  return pass_fd(dir, fd, session, std::vector<uint8_t>(session.begin(), session.end()), why);
}

SessionDoor::~SessionDoor() { close(); }

bool SessionDoor::open(const std::string& dir, const SessionId& session, OnResume on_resume, std::string* err) {
  path_ = dir + "/" + session_hex(session);
  sockaddr_un a;
  if (!fill_addr(path_, &a, err)) return false;
  listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (listen_fd_ < 0 || pipe2(wake_, O_CLOEXEC) != 0) {
    *err = log::format("cannot make the session socket: %s", std::strerror(errno));
    close();
    return false;
  }
  unlink(path_.c_str());
  if (bind(listen_fd_, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(listen_fd_, 8) != 0) {
    *err = log::format("cannot listen at the session socket %s: %s", path_.c_str(), std::strerror(errno));
    close();
    return false;
  }
  chmod(path_.c_str(), 0600);
  on_resume_ = std::move(on_resume);
  thread_ = std::thread([this] { serve(); });
  return true;
}

void SessionDoor::close() {
  if (wake_[1] >= 0) {
    char b = 1;
    (void)!::write(wake_[1], &b, 1);
  }
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&listen_fd_, &wake_[0], &wake_[1]}) {
    if (*fd >= 0) ::close(*fd);
    *fd = -1;
  }
  if (!path_.empty()) unlink(path_.c_str());
  path_.clear();
}

void SessionDoor::serve() {
  for (;;) {
    pollfd p[2] = {{listen_fd_, POLLIN, 0}, {wake_[0], POLLIN, 0}};
    if (poll(p, 2, -1) < 0) {
      if (errno == EINTR) continue;
      return;
    }
    if (p[1].revents) return;
    int c = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
    if (c < 0) continue;
    // One message: the hello, with the client's socket attached. Whatever else arrives (a
    // stale-socket probe that sends nothing) is dropped.
    uint8_t buf[kHelloBytes + 1];
    FdMessage msg(buf, sizeof buf);
    pollfd wait{c, POLLIN, 0};
    ssize_t n = poll(&wait, 1, 2000) == 1 ? recvmsg(c, &msg.m, MSG_CMSG_CLOEXEC) : -1;
    ::close(c);
    int fd = -1;
    for (cmsghdr* h = n > 0 ? CMSG_FIRSTHDR(&msg.m) : nullptr; h; h = CMSG_NXTHDR(&msg.m, h))
      if (h->cmsg_level == SOL_SOCKET && h->cmsg_type == SCM_RIGHTS && h->cmsg_len == CMSG_LEN(sizeof(int)))
        std::memcpy(&fd, CMSG_DATA(h), sizeof fd);
    if (fd >= 0 && n == static_cast<ssize_t>(kTlsHandOverBytes)) {
      on_resume_(fd, nullptr);
      continue;
    }
    ResumeHello hello;
    Reader r(buf, n > 0 ? static_cast<size_t>(n) : 0);
    if (fd < 0 || n != static_cast<ssize_t>(kHelloBytes) || !decode(r, &hello)) {
      if (fd >= 0) ::close(fd);
      continue;
    }
    on_resume_(fd, &hello);
  }
}

std::string server_session_dir(std::string runtime_dir, uint16_t port) {
  if (runtime_dir.empty()) runtime_dir = default_runtime_dir();
  std::string dir, err;
  if (prepare_session_dir(runtime_dir, port, &dir, &err)) return dir;
  log::warn("%s; sessions cannot be resumed after their connection breaks (give --runtime-dir DIR)", err.c_str());
  return "";
}

std::unique_ptr<Channel> start_server_channel(int fd, const ServerChannelSetup& setup, SessionDoor* door) {
  ChannelOptions o = ChannelOptions::from_env();
  o.resume_window = setup.grace;
  o.peer = "client " + setup.identity;
  o.on_connection = setup.on_connection;
  auto ch = std::make_unique<Channel>(Side::kServer, setup.session, setup.token, o);
  set_liveness(fd);  // a client gone without a word is noticed by the kernel too
  const std::string peer = net::peer_name(fd);
  if (!ch->start(setup.transport ? setup.transport : std::shared_ptr<Transport>(socket_transport(fd)))) {
    log::warn("the connection from %s closed right after the handshake", peer.c_str());
    return nullptr;
  }
  // A stopping server's drain (protocol/drain.h) tells the client through the channel, and at its
  // deadline closes it: the session's reading loop then ends with that reason.
  drain_attach(ch.get());
  if (setup.door_dir.empty()) return ch;
  std::string err;
  Channel* raw = ch.get();
  const std::string identity = setup.identity;
  const std::shared_ptr<TlsContext> tls = setup.tls;
  const SessionId session = setup.session;
  if (!door->open(setup.door_dir, setup.session,
                  [raw, identity, tls, session](int nfd, const ResumeHello* plain_hello) {
                    std::string why;
                    std::string from = net::peer_name(nfd);
                    net::set_nodelay(nfd);
                    set_liveness(nfd);
                    std::unique_ptr<Transport> t;
                    ResumeHello hello;
                    if (plain_hello) {
                      hello = *plain_hello;
                      t = socket_transport(nfd);
                    } else {
                      // A TLS connection, handed over before its TLS began: this process runs the
                      // TLS handshake, then reads the resume inside it (bounded: a client that
                      // stalls holds this door for 10 s at most).
                      if (!tls) {
                        log::warn("a TLS resume from %s reached a session without TLS; closing it", from.c_str());
                        ::close(nfd);
                        return;
                      }
                      const auto deadline = Clock::now() + std::chrono::seconds(10);
                      std::unique_ptr<TlsTransport> secure = tls_accept(tls, nfd, true, deadline, &why);
                      if (!secure) {
                        ::close(nfd);
                        log::warn("a resume of the session for %s from %s failed: %s", identity.c_str(), from.c_str(),
                                  why.c_str());
                        return;
                      }
                      t = std::move(secure);
                      if (!read_resume_hello(*t, &hello, &why, std::chrono::seconds(10))) {
                        log::warn("a resume of the session for %s from %s failed: %s", identity.c_str(), from.c_str(),
                                  why.c_str());
                        return;
                      }
                      if (hello.session != session) {
                        // The preamble named this session and the resume inside TLS another: the
                        // channel refuses it as no such session.
                        log::warn("a TLS resume from %s named another session inside TLS than in its preamble",
                                  from.c_str());
                      }
                    }
                    if (raw->accept_resume(std::move(t), hello, &why))
                      log::info("session for %s resumed from %s", identity.c_str(), from.c_str());
                    else
                      log::warn("a resume of the session for %s from %s was refused: %s", identity.c_str(), from.c_str(),
                                why.c_str());
                  },
                  &err))
    log::warn("%s; this session cannot be resumed after its connection breaks", err.c_str());
  return ch;
}

}  // namespace rgpu::proto
