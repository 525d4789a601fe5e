// Text a target controls (its comm, RANK, cgroup path, command line, and
// record's messages about it) on its way into what the agent writes: file
// names, log lines, trigger answers. Any process can set its comm and
// environment to anything, newlines and "../" included, so each sink gets
// text that cannot leave its place: a name cannot reach another folder, a
// log line cannot start another line or drive root's terminal.
#ifndef TORCHPROBE_AGENT_TARGET_TEXT_H
#define TORCHPROBE_AGENT_TARGET_TEXT_H

#include <cstddef>
#include <string>
#include <string_view>

namespace torchprobe {

// One line of printable ASCII: every other byte (newline, escape, DEL,
// non-ASCII) as \xNN, and cut to `max_bytes` with "..." at the end.
std::string LogSafe(std::string_view text, size_t max_bytes);

// A piece of a file name: letters, digits and `also` kept, every other byte
// '_', cut to `max_bytes`. No '/', no NUL, no newline can pass; a '.' only
// where `also` allows it.
std::string NameSafe(std::string_view text, size_t max_bytes, std::string_view also = "");

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_TARGET_TEXT_H
