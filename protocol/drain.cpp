// Implementation of protocol/drain.h.
#include "protocol/drain.h"

#include <dirent.h>
#include <pthread.h>
#include <signal.h>
#include <sys/uio.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <fstream>
#include <mutex>
#include <sstream>
#include <thread>

#include "common/log.h"
#include "protocol/channel.h"
#include "protocol/messages.h"

namespace rgpu::proto {

void encode(const Notice& m, Writer* w) {
  w->put<uint8_t>(m.kind);
  w->put_u32(m.seconds);
  w->put_str(m.text);
}

bool decode(Reader& r, Notice* m) {
  m->kind = r.u8();
  m->seconds = r.u32();
  m->text = log::printable(r.str(kMaxNoticeText));  // the server's word, logged and shown to the user
  if (!r.ok() || r.left() != 0) return r.fail();
  return m->kind == kNoticeDraining || m->kind == kNoticeEnded;
}

namespace {

// How long a session may take to end by itself once its channel is closed at the deadline (its
// last log line, its list entry's removal) before this thread ends the process: a call hanging in
// the driver must not keep a stopped server's session alive.
constexpr auto kEndGrace = std::chrono::seconds(3);

struct State {
  std::mutex mu;
  std::mutex use_mu;  // held while a notice is sent on `channel` (the sender thread)
  Channel* channel = nullptr;
  DrainSettings settings;
  std::atomic<bool> draining{false};
  bool ended = false;                                      // under mu: the end has begun
  Clock::time_point deadline = Clock::time_point::max();  // under mu, once draining
};
State& state() {
  static State* s = new State;  // never destroyed: the watch thread outlives main's statics
  return *s;
}

sigset_t stop_signals() {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGTERM);
  sigaddset(&set, SIGINT);
  return set;
}

// Sends notices on a thread of its own, in order, closing the channel after one that ends the
// session: a send may wait for the client's acknowledgements, and the drain's clock must not wait
// with it.
struct Outgoing {
  Channel* channel;
  Notice notice;
  std::string close_why;  // non-empty: close the channel with it once the notice is sent
};
void send_notice(Channel* ch, uint8_t kind, uint32_t seconds, std::string text, std::string close_why) {
  static std::mutex& mu = *new std::mutex;
  static std::condition_variable& cv = *new std::condition_variable;
  static std::deque<Outgoing>& queue = *new std::deque<Outgoing>;
  static bool started = false;
  std::lock_guard<std::mutex> lock(mu);
  queue.push_back({ch, Notice{kind, seconds, std::move(text)}, std::move(close_why)});
  cv.notify_one();
  if (started) return;
  started = true;
  std::thread([] {
    for (;;) {
      Outgoing out;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [] { return !queue.empty(); });
        out = std::move(queue.front());
        queue.pop_front();
      }
      // Only to the channel still attached: drain_attach(nullptr) waits for a send in flight.
      std::lock_guard<std::mutex> use(state().use_mu);
      {
        std::lock_guard<std::mutex> lock(state().mu);
        if (state().channel != out.channel) continue;
      }
      std::vector<uint8_t> payload;
      Writer w(&payload);
      encode(out.notice, &w);
      iovec part{payload.data(), payload.size()};
      out.channel->send(kOpNotice, 0, 0, 0, &part, 1, true);
      if (!out.close_why.empty()) out.channel->close(out.close_why);
    }
  }).detach();
}

// The session's drain, from the first request to the end (the watch thread).
void watch() {
  State& s = state();
  const sigset_t set = stop_signals();
  bool draining = false, end_now = false;
  int plain = 0;          // plain signals seen (kill, Ctrl-C): the second one ends the session
  long long given_s = 0;  // the drain time the deadline came from
  Clock::time_point deadline = Clock::time_point::max();
  for (;;) {
    siginfo_t info{};
    int sig;
    if (!draining) {
      sig = sigwaitinfo(&set, &info);
    } else {
      auto left = deadline - Clock::now();
      if (end_now || left <= Clock::duration::zero()) break;
      auto ns = std::chrono::duration_cast<std::chrono::nanoseconds>(left).count();
      timespec ts{static_cast<time_t>(ns / 1000000000), static_cast<long>(ns % 1000000000)};
      sig = sigtimedwait(&set, &info, &ts);
    }
    if (sig < 0) continue;  // EAGAIN: the deadline (checked above); EINTR
    long long value;
    const bool queued = info.si_code == SI_QUEUE;
    const char* what = queued ? "the listener's request" : sig == SIGINT ? "SIGINT" : "SIGTERM";
    if (queued) {
      value = info.si_value.sival_int;  // the listener's request (request_drain)
    } else {
      value = ++plain >= 2 ? kEndNow : static_cast<long long>(s.settings.timeout.count());
    }
    if (value < 0) {
      log::info("asked to end at once (%s); ending the session", what);
      draining = true;
      end_now = true;
      s.draining.store(true);
      continue;
    }
    const Clock::time_point d = Clock::now() + std::chrono::seconds(value);
    if (draining) {
      if (d < deadline) {
        deadline = d;
        given_s = value;
        std::lock_guard<std::mutex> lock(s.mu);
        s.deadline = d;
      }
      continue;
    }
    draining = true;
    deadline = d;
    given_s = value;
    std::lock_guard<std::mutex> lock(s.mu);
    s.deadline = d;
    s.draining.store(true);
    log::info("draining (%s): the client has %lld s to finish%s", what, value,
              s.channel ? "; told it so" : "");
    if (s.channel)
      send_notice(s.channel, kNoticeDraining, static_cast<uint32_t>(value),
                  log::format("%s is shutting down; %lld s to finish", s.settings.server.c_str(), value), "");
  }
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.ended = true;
    std::string client_why, server_why;
    if (end_now) {
      client_why = s.settings.server +
                   " ended this session at once (it was told to stop a second time while draining); restart the "
                   "program once the server is back";
      server_why = "the server was told to stop a second time while draining, ending its sessions at once";
    } else {
      client_why = log::format(
          "%s shut down (it was stopped, and its drain time of %lld s ran out); restart the program once the "
          "server is back",
          s.settings.server.c_str(), given_s);
      server_why = log::format("its drain time of %lld s ran out (the server is shutting down)", given_s);
    }
    if (s.channel) {
      send_notice(s.channel, kNoticeEnded, 0, client_why, server_why);
    } else {
      log::info("session ended: %s", server_why.c_str());
      _exit(0);
    }
  }
  std::this_thread::sleep_for(kEndGrace);
  log::warn("the session did not end within %lld s of its drain time's end; ending its process",
            static_cast<long long>(kEndGrace.count()));
  _exit(1);
}

}  // namespace

void block_stop_signals() {
  sigset_t set = stop_signals();
  pthread_sigmask(SIG_BLOCK, &set, nullptr);
}

void start_drain_watch(const DrainSettings& settings) {
  block_stop_signals();
  signal(SIGHUP, SIG_IGN);
  // A process the session starts (a compiler, a helper) gets the usual signals back.
  pthread_atfork(nullptr, nullptr, [] {
    signal(SIGHUP, SIG_DFL);
    sigset_t set = stop_signals();
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
  });
  state().settings = settings;
  std::thread(watch).detach();
}

void drain_attach(Channel* channel) {
  State& s = state();
  if (!channel) {
    {
      std::lock_guard<std::mutex> lock(s.mu);
      s.channel = nullptr;
    }
    std::lock_guard<std::mutex> use(s.use_mu);  // a notice being sent on the old one is done
    return;
  }
  std::lock_guard<std::mutex> lock(s.mu);
  s.channel = channel;
  // Asked to drain before the session had its channel (during the handshake): tell the client now.
  if (s.draining.load() && !s.ended) {
    const long long left =
        std::max<long long>(0, std::chrono::ceil<std::chrono::seconds>(s.deadline - Clock::now()).count());
    send_notice(channel, kNoticeDraining, static_cast<uint32_t>(left),
                log::format("%s is shutting down; %lld s to finish", s.settings.server.c_str(), left), "");
  }
}

bool draining() { return state().draining.load(); }

bool request_drain(pid_t pid, int value) {
  sigval v{};
  v.sival_int = value;
  return sigqueue(pid, SIGTERM, v) == 0;
}

namespace {

std::string exe_name(const std::string& link) {
  char buf[PATH_MAX];
  ssize_t n = readlink(link.c_str(), buf, sizeof buf - 1);
  if (n <= 0) return {};
  std::string p(buf, static_cast<size_t>(n));
  // A binary replaced since the process started (an upgrade) reads "PATH (deleted)".
  const std::string deleted = " (deleted)";
  if (p.size() > deleted.size() && p.compare(p.size() - deleted.size(), deleted.size(), deleted) == 0)
    p.resize(p.size() - deleted.size());
  return p.substr(p.rfind('/') + 1);
}

// When pid started, in unix seconds (-1 when it cannot be read): /proc/PID/stat's 22nd field is
// the start in clock ticks after boot, /proc/stat's btime the boot.
long long start_time(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(f, line)) return -1;
  size_t close = line.rfind(')');  // the command name may hold spaces and parentheses
  if (close == std::string::npos) return -1;
  std::istringstream rest(line.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i != 22) continue;
    long long ticks = std::atoll(field.c_str());
    std::ifstream st("/proc/stat");
    std::string key;
    long long boot = -1;
    while (st >> key) {
      if (key == "btime") {
        st >> boot;
        break;
      }
      std::getline(st, key);
    }
    if (boot < 0) return -1;
    return boot + ticks / sysconf(_SC_CLK_TCK);
  }
  return -1;
}

}  // namespace

bool runs_this_program(pid_t pid) {
  if (pid <= 0 || kill(pid, 0) != 0) return false;
  std::string mine = exe_name("/proc/self/exe");
  return !mine.empty() && exe_name("/proc/" + std::to_string(pid) + "/exe") == mine;
}

std::vector<pid_t> listed_sessions(const std::string& dir) {
  std::vector<pid_t> out;
  DIR* d = dir.empty() ? nullptr : opendir(dir.c_str());
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    long pid = std::strtol(e->d_name, &end, 10);
    if (!*e->d_name || *end || pid <= 0 || pid == getpid()) continue;
    std::ifstream f(dir + "/" + e->d_name);
    std::string line;
    if (!std::getline(f, line)) continue;
    size_t a = line.find('\t'), b = a == std::string::npos ? a : line.find('\t', a + 1);
    if (b == std::string::npos) continue;
    const long long listed_start = std::atoll(line.c_str() + b + 1);
    if (!runs_this_program(static_cast<pid_t>(pid))) continue;
    const long long started = start_time(static_cast<pid_t>(pid));
    // The entry is written after the process starts; one started later is another process.
    if (started < 0 || started > listed_start + 1) continue;
    out.push_back(static_cast<pid_t>(pid));
  }
  closedir(d);
  return out;
}

NoticeAction take_notice(Channel& ch, const uint8_t* payload, size_t n, std::string* why) {
  Notice notice;
  Reader r(payload, n);
  if (!decode(r, &notice)) {
    *why = log::format("the server sent a malformed notice (%zu bytes)", n);
    return NoticeAction::kMalformed;
  }
  // The text is the user's only explanation (the log line, the reason calls fail): a server that
  // sent none still gets one (found by channel_fuzz: an ended session with an empty reason).
  if (notice.text.empty())
    notice.text = notice.kind == kNoticeDraining ? "the server is shutting down (it gave no reason)"
                                                 : "the server ended this session (it gave no reason)";
  if (notice.kind == kNoticeDraining) {
    log::warn("%s", notice.text.c_str());  // "rgpu-server at X is shutting down; 60 s to finish"
    // Past the drain time the session is gone: a connection that breaks then (the server closed
    // it before this process read the kNoticeEnded behind it) is not redialled. A few seconds of
    // slack for the clocks' start.
    ch.resume_until(Clock::now() + std::chrono::seconds(notice.seconds) + std::chrono::seconds(5),
                    log::format("the server was stopped, and its drain time of %u s ran out; restart the "
                                "program once the server is back",
                                notice.seconds));
    return NoticeAction::kDraining;
  }
  // kNoticeEnded: the server has ended the session and closes the connection; its text is the
  // reason the calls fail from now on. Nothing to redial.
  log::error("%s", notice.text.c_str());
  ch.close(notice.text);
  *why = notice.text;
  return NoticeAction::kEnded;
}

}  // namespace rgpu::proto
