// The agent's listening sockets (the trigger socket, the metrics port), each
// serving many clients from the agent's one thread without ever blocking it.
//
// Why a state machine in the agent's poll() and not a read with a timeout:
// a timeout per read() bounds nothing (a client that sends a byte every
// 190 ms held the metrics responder, and with it every window, scan and
// SIGTERM, for 25 minutes), and a timeout per request would still stall the
// loop for its length, once per client. Here every client socket is
// non-blocking and read only when poll() says it has bytes, so the loop
// never waits on a client. Each request has one deadline from its accept
// and a byte budget; a client past either is closed and counted (dropped).
// The answer is written the same way, within the same bound. At most
// max_reading requests are read at once: while that many are open the
// listener is left out of poll() and the kernel's backlog holds the rest.
// When accept() fails for want of file descriptors (EMFILE, ENFILE) the
// listener is left out for a second, and counted, instead of spinning on a
// connection it cannot take.
//
// A request the caller takes is held (no deadline: a trigger's answer comes
// when its window is written) until the caller answers it.
#ifndef TORCHPROBE_AGENT_REQUEST_SERVER_H
#define TORCHPROBE_AGENT_REQUEST_SERVER_H

#include <poll.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <string_view>
#include <vector>

namespace torchprobe {

struct RequestLimits {
  size_t max_reading = 16;           // requests being read at once
  size_t max_bytes = 8192;           // a longer request is dropped
  uint64_t deadline_ns = 1'000'000'000;  // to read a request, and again to write its answer
  std::function<bool(std::string_view)> complete;  // the bytes so far are a whole request
};

struct Request {
  int client = -1;   // answer with RequestServer::Answer
  std::string text;  // the request's bytes
};

class RequestServer {
 public:
  explicit RequestServer(RequestLimits limits) : limits_(std::move(limits)) {}
  ~RequestServer();  // closes the listener and every client
  RequestServer(const RequestServer&) = delete;
  RequestServer& operator=(const RequestServer&) = delete;

  // Takes a listening socket (made non-blocking here).
  void Adopt(int listen_fd);
  int listen_fd() const { return listen_fd_; }

  // Appends what poll() should watch: the listener (unless paused or full),
  // each client being read or answered.
  void AddPollFds(uint64_t now_ns, std::vector<pollfd>* fds);
  // After poll(): `fds` as AddPollFds left them (other entries ignored).
  // Accepts, reads, writes, closes what is past its deadline or budget;
  // appends the requests that came whole.
  void Service(const std::vector<pollfd>& fds, uint64_t now_ns, std::vector<Request>* requests);
  // When Service has work to do without an event (a deadline, a pause's
  // end); UINT64_MAX when never.
  uint64_t NextWakeNs() const;

  // Writes `text` to a held client as its socket takes it, then closes it.
  void Answer(int client, std::string text, uint64_t now_ns);

  size_t reading() const;
  size_t held() const;
  uint64_t dropped() const { return dropped_; }                  // past their deadline or byte budget
  uint64_t accept_failures() const { return accept_failures_; }  // out of file descriptors

 private:
  enum class State { kReading, kHeld, kWriting };
  struct Client {
    State state = State::kReading;
    uint64_t deadline_ns = 0;
    std::string in;
    std::string out;
    size_t sent = 0;
  };
  void Accept(uint64_t now_ns);
  void Read(int fd, Client* client, std::vector<Request>* requests);
  bool Write(int fd, Client* client);  // true once all is sent
  void Close(int fd);

  RequestLimits limits_;
  int listen_fd_ = -1;
  uint64_t paused_until_ns_ = 0;
  std::map<int, Client> clients_;
  std::vector<int> polled_;  // fds of the last AddPollFds, in order (-1: the listener)
  size_t first_polled_ = 0;  // where they start in the pollfd array
  uint64_t dropped_ = 0;
  uint64_t accept_failures_ = 0;
};

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_REQUEST_SERVER_H
