// On-demand windows: `torchprobe trigger --pid P --duration S` asks a
// running agent for a window now, over a unix socket (default
// /run/torchprobe-agent.sock, --socket to change it; root-only, mode 0600).
// A unix socket rather than a signal: the request carries its pid and
// duration, and the answer (the window's file, or why there is none) comes
// back on the same connection once the window is written.
//
// Protocol, one line each way:  "window PID SECONDS\n"  ->  "ok FILE\n" | "error WHY\n"
#ifndef TORCHPROBE_AGENT_TRIGGER_SOCKET_H
#define TORCHPROBE_AGENT_TRIGGER_SOCKET_H

#include <cstdint>
#include <string>

namespace torchprobe {

inline constexpr const char* kDefaultAgentSocket = "/run/torchprobe-agent.sock";

struct TriggerRequest {
  uint32_t pid = 0;
  double duration_s = 0;
};

// The agent's side.
class TriggerServer {
 public:
  ~TriggerServer();
  // Replaces a stale socket file (an agent that died) but not a live agent's.
  bool Listen(const std::string& path, std::string* error);
  int fd() const { return fd_; }
  // Accepts one client and reads its request (bounded: 1 s); returns the
  // client's fd with *request filled in, or -1 (a bad request is answered
  // with its error and closed here).
  int Accept(TriggerRequest* request);
  // Writes the answer line and closes the client.
  static void Reply(int client, const std::string& line);

 private:
  int fd_ = -1;
  std::string path_;
};

// The `trigger` command's side: sends the request and waits for the answer
// (up to the duration + 120 s). Returns the answer line without its newline,
// or "error ..." when the agent cannot be reached.
std::string SendTrigger(const std::string& path, const TriggerRequest& request);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_TRIGGER_SOCKET_H
