// Command-line helpers every subcommand's parser shares (main.cc, agent/agent_cli.cc).
#ifndef TORCHPROBE_CLI_ARGS_H
#define TORCHPROBE_CLI_ARGS_H

#include <string>
#include <vector>

namespace torchprobe {

inline bool IsHelp(const std::string& arg) { return arg == "-h" || arg == "--help"; }

// Takes "--flag VALUE", "--flag=VALUE" and "-f VALUE"; returns false if
// `args[*i]` is not this flag, and sets `*missing` when its value is absent.
inline bool TakeValue(const std::vector<std::string>& args, size_t* i, const char* long_name,
                      const char* short_name, std::string* value, bool* missing) {
  const std::string& arg = args[*i];
  std::string prefix = std::string(long_name) + "=";
  if (arg.rfind(prefix, 0) == 0) {
    *value = arg.substr(prefix.size());
    return true;
  }
  if (arg != long_name && (!short_name || arg != short_name)) return false;
  if (*i + 1 >= args.size()) {
    *missing = true;
    return true;
  }
  *value = args[++*i];
  return true;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_CLI_ARGS_H
