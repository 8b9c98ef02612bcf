// Draining a server that is being stopped (issue 16, item 6), for both servers (rgpu-server,
// rgpu-opserver).
//
// SIGTERM or SIGINT to the listening parent (protocol/accept_loop.h) starts a drain: it stops
// accepting, asks every live session process of its port to drain, waits up to --drain-timeout for
// them to end, and exits 0. Each session process, asked, sends its client a kOpNotice
// (kNoticeDraining, protocol/messages.h) that the client logs ("rgpu-server at X is shutting down;
// 60 s to finish") and goes on serving calls; when the client leaves, the session ends as always.
// At the drain time's end the session sends kNoticeEnded with the reason and ends, so the client's
// next call fails with that reason instead of redialling a server that is gone. A second SIGTERM
// or SIGINT to the listener ends every session at once.
//
// How the listener asks: sigqueue(pid, SIGTERM, value), the value being the drain time in
// seconds, or kEndNow. A session process blocks SIGTERM and SIGINT in all its threads (from its
// fork on, so no blocking call is ever interrupted) and takes them on a thread of its own
// (start_drain_watch). A plain SIGTERM or SIGINT (kill, a terminal's Ctrl-C, which reaches the
// whole process group) asks for a drain with the session's own drain time; a second plain one
// ends the session at once. SIGHUP is ignored by sessions: it is the listener's "exit now and
// leave the sessions to the next server on this port".
#pragma once

#include <sys/types.h>

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "common/wire.h"

namespace rgpu::proto {

class Channel;

// kOpNotice's payload (layout in protocol/messages.h).
struct Notice {
  uint8_t kind = 0;      // kNoticeDraining or kNoticeEnded
  uint32_t seconds = 0;  // kNoticeDraining: the drain time left
  std::string text;
};
void encode(const Notice& m, Writer* w);
// Takes a whole payload: false when it is short, long, of an unknown kind, or its text is over
// kMaxNoticeText.
bool decode(Reader& r, Notice* m);

// What a session process needs to know to drain; set by the listener, inherited by its sessions.
struct DrainSettings {
  std::string server;                // how notices name the server: "rgpu-server at 127.0.0.1:9713"
  std::chrono::seconds timeout{60};  // --drain-timeout: the drain time of a plain signal
};

// A drain request's value (sigqueue's sival_int): seconds >= 0, or this (end the session now).
inline constexpr int kEndNow = -2;

// ---- In a client ----

// What a client does with a kOpNotice's payload (its reading side calls this for every notice):
// kDraining is logged as a warning, and the channel stops redialling a while after the drain
// time; kEnded is logged as an error and closes the channel with its text, which *why gets (the
// reason the calls fail from now on); kMalformed: *why says so (the caller drops the session).
enum class NoticeAction { kDraining, kEnded, kMalformed };
NoticeAction take_notice(Channel& ch, const uint8_t* payload, size_t n, std::string* why);
// A client idle this long reads what came meanwhile (a notice) before its next call goes out:
// otherwise that call's write could meet a connection the server has closed, the notice with the
// reason unread, and the channel would redial a server that is gone.
inline constexpr std::chrono::seconds kCatchUpAfterIdle{1};

// ---- In a session process ----

// Blocks SIGTERM and SIGINT in the calling thread (and so in the threads it starts later). The
// accept loop calls it in each process it forks, before anything else.
void block_stop_signals();
// Starts the thread that takes drain requests (called once, when the process has taken its
// connection): SIGHUP is ignored from then on. Until drain_attach gives it the session's channel,
// a drain only ends the process at its deadline.
void start_drain_watch(const DrainSettings& settings);
// The session's channel: drain notices go through it, and at the deadline it is closed with the
// reason (the session's reading loop then sees kLost, why() saying it). nullptr detaches (before
// the channel is destroyed; it waits for a notice being sent on it). A session calls this right
// after Channel::start.
void drain_attach(Channel* channel);
// True once this session process was asked to drain.
bool draining();

// ---- In the listener ----

// Sends pid a drain request (value: seconds, or kEndNow). False when the signal could not be sent.
bool request_drain(pid_t pid, int value);
// The pids of the live sessions listed in a sessions directory (server/session.h's entries:
// <dir>/<pid>, first line "identity\tpeer\tstart\t..."), each checked to be a process of this
// very program that started no later than its entry says (so a pid reused by another process,
// after a session died without removing its entry, is left alone).
std::vector<pid_t> listed_sessions(const std::string& dir);
// True when pid is a live process running this program's executable.
bool runs_this_program(pid_t pid);

}  // namespace rgpu::proto
