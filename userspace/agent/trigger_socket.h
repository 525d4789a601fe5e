// On-demand windows: `torchprobe trigger --pid P --duration S` asks a
// running agent for a window now, over a unix socket (default
// /run/torchprobe-agent.sock, --socket to change it; root-only, mode 0600).
// A unix socket rather than a signal: the request carries its pid and
// duration, and the answer (the window's file, or why there is none) comes
// back on the same connection once the window is written.
//
// Protocol, one line each way:  "window PID SECONDS\n"  ->  "ok FILE\n" | "error WHY\n"
//
// The agent reads requests through a RequestServer (request_server.h): a
// whole line within 1 s of the connection and 256 bytes, or the client is
// dropped; at most 16 read at once. A request waits for its window with no
// deadline; at most kMaxWaitingTriggers wait at once, more are answered
// "error" at once.
#ifndef TORCHPROBE_AGENT_TRIGGER_SOCKET_H
#define TORCHPROBE_AGENT_TRIGGER_SOCKET_H

#include <cstdint>
#include <string>

#include "userspace/agent/request_server.h"

namespace torchprobe {

inline constexpr const char* kDefaultAgentSocket = "/run/torchprobe-agent.sock";
inline constexpr size_t kMaxWaitingTriggers = 64;
inline constexpr uint32_t kMaxPid = 4'194'304;  // PID_MAX_LIMIT on 64-bit Linux

struct TriggerRequest {
  uint32_t pid = 0;
  double duration_s = 0;
  bool dump = false;  // a flight recorder dump, not a window
};

// "window PID SECONDS" or "dump PID": false with *why for anything else (a
// pid outside 1..kMaxPid, SECONDS outside (0, 3600], bytes after them).
bool ParseTriggerRequest(const std::string& line, TriggerRequest* request, std::string* why);

// The agent's side.
class TriggerServer {
 public:
  TriggerServer();
  ~TriggerServer();
  // Replaces a stale socket file (an agent that died) but not a live agent's.
  bool Listen(const std::string& path, std::string* error);
  RequestServer& server() { return server_; }
  // Writes the answer line (made one printable line) and closes the client.
  void Reply(int client, const std::string& line, uint64_t now_ns);

 private:
  RequestServer server_;
  std::string path_;
};

// The `trigger` command's side: sends the request and waits for the answer
// (up to the duration + 120 s). Returns the answer line without its newline,
// or "error ..." when the agent cannot be reached.
std::string SendTrigger(const std::string& path, const TriggerRequest& request);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_TRIGGER_SOCKET_H
