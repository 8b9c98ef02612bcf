// Where a resuming client finds its session again (issue 16, "restart without loss").
//
// Each session runs in a process of its own (protocol/accept_loop.h), and that process outlives
// the listening parent. A client whose connection broke dials the server's port again and sends
// kOpResume (protocol/channel.h) instead of Hello; whichever process accepts that connection (a
// spare of this rgpu-server, or of a new one started after a crash or an upgrade) hands the
// socket to the session's own process, which runs the resume proof on it.
//
// The hand-over goes through a directory per listening port, `<runtime dir>/<port>/`, mode 0700:
// every live session process listens on a Unix socket there named by its session id in hex, and
// takes connections passed to it with SCM_RIGHTS, each with the client's ResumeHello (or, for a
// TLS connection, only the session id from its clear preamble: TLS has not begun, and the
// session's process runs the TLS handshake and reads the ResumeHello inside it). A socket
// that no process listens on (its session died) is stale: connecting to it is refused, and it is
// removed (clean_stale at start, and by the hand-over that finds it).
#pragma once

#include <functional>
#include <string>
#include <thread>

#include "protocol/channel.h"
#include "protocol/tls.h"

namespace rgpu::proto {

// The runtime directory when none is given: $XDG_RUNTIME_DIR/rgpu, else /run/rgpu when it can be
// made, else /tmp/rgpu-UID.
std::string default_runtime_dir();

// Makes <runtime_dir>/<port> (and its parents), mode 0700, and removes stale session sockets in
// it. False with *err naming the path and the cause.
bool prepare_session_dir(const std::string& runtime_dir, uint16_t port, std::string* dir, std::string* err);
// prepare_session_dir for a server starting on `port` (runtime_dir "" : default_runtime_dir()):
// the directory, or "" after a warning that its sessions cannot be resumed through another
// process (the warning names the cause and --runtime-dir).
std::string server_session_dir(std::string runtime_dir, uint16_t port);
// Removes the sockets in dir that no process listens on any more; returns how many.
int clean_stale(const std::string& dir);

// A session id as its socket's name: 32 hex digits.
std::string session_hex(const SessionId& id);

// Hands a resuming client's connection (fd, whose kOpResume frame has been read: hello) to the
// process of that session. The caller keeps fd and closes it either way. False with *why when no
// live process holds that session (the caller tells the client: its session is gone).
bool hand_over(const std::string& dir, int fd, const ResumeHello& hello, std::string* why);
// The same for a TLS connection whose preamble (kTlsResume) named `session`: TLS has not begun.
bool hand_over_tls(const std::string& dir, int fd, const SessionId& session, std::string* why);

// The session process's end: a Unix socket at <dir>/<session hex>, and a thread that gives each
// handed-over connection to on_resume (which owns the fd from then on).
class SessionDoor {
 public:
  // hello is nullptr for a TLS connection handed over before its TLS handshake (hand_over_tls).
  using OnResume = std::function<void(int fd, const ResumeHello* hello)>;
  SessionDoor() = default;
  ~SessionDoor();
  SessionDoor(const SessionDoor&) = delete;
  SessionDoor& operator=(const SessionDoor&) = delete;

  // False with *err when the socket cannot be made (the session then runs, but cannot be resumed
  // through another process).
  bool open(const std::string& dir, const SessionId& session, OnResume on_resume, std::string* err);
  // Stops taking connections and removes the socket.
  void close();

 private:
  void serve();
  std::string path_;
  int listen_fd_ = -1;
  int wake_[2] = {-1, -1};  // close() writes to wake_[1] so serve() leaves poll
  OnResume on_resume_;
  std::thread thread_;
};

// What a server session's channel needs besides its socket.
struct ServerChannelSetup {
  SessionId session{};       // from the handshake
  std::string token;         // the server's token ("" for none)
  std::chrono::seconds grace{600};  // how long a broken connection may take to come back
  std::string door_dir;      // prepare_session_dir's; empty: no resume through another process
  std::string identity;      // the client, for messages
  // TLS: the stream the handshake ran on (the channel runs on it instead of a socket on fd), and
  // the server's context, for the TLS handshake of a resuming client's connection. nullptr: plain.
  std::shared_ptr<Transport> transport;
  std::shared_ptr<TlsContext> tls;
  // ChannelOptions::on_connection (the server's session list shows disconnected sessions).
  std::function<void(bool connected)> on_connection;
};

// Starts a server session's end of the channel on the handshake's socket (fd, which the channel
// then owns) and opens the door its client comes back through after a break: a connection handed
// over there is given to Channel::accept_resume. nullptr (logged) when the connection closed right
// after the handshake. The channel is attached to the drain (protocol/drain.h: drain_attach), so
// the caller calls drain_attach(nullptr) before destroying it. rgpu-server's and rgpu-opserver's
// sessions both start theirs here; `door` must outlive the channel's use.
std::unique_ptr<Channel> start_server_channel(int fd, const ServerChannelSetup& setup, SessionDoor* door);

}  // namespace rgpu::proto
