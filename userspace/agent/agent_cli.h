// The command lines of `torchprobe agent`, `trigger` and `merge`: parsing
// into options and calling the agent code; main.cc only dispatches here.
#ifndef TORCHPROBE_AGENT_AGENT_CLI_H
#define TORCHPROBE_AGENT_AGENT_CLI_H

#include <string>
#include <vector>

namespace torchprobe {

// Each returns the process exit code (0 ok, 1 runtime error, 2 usage error).
int AgentCommand(const std::vector<std::string>& args);
int TriggerCommand(const std::vector<std::string>& args);
int MergeCommand(const std::vector<std::string>& args);

}  // namespace torchprobe

#endif  // TORCHPROBE_AGENT_AGENT_CLI_H
