// Command-line helpers every subcommand's parser shares (main.cc, agent/agent_cli.cc).
#ifndef TORCHPROBE_CLI_ARGS_H
#define TORCHPROBE_CLI_ARGS_H

#include <cerrno>
#include <cstdint>
#include <cstdlib>
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

// "4096", "512K", "256M", "2G" (powers of 1024): false for anything else,
// a negative number, or a size that does not fit 64 bits.
inline bool ParseByteSize(const std::string& text, uint64_t* bytes) {
  char* end = nullptr;
  errno = 0;
  unsigned long long value = std::strtoull(text.c_str(), &end, 10);
  if (text.empty() || end == text.c_str() || errno || text[0] == '-') return false;
  std::string suffix = end;
  uint64_t scale = suffix == "" ? 1 : suffix == "K" ? 1ull << 10 : suffix == "M" ? 1ull << 20 : suffix == "G" ? 1ull << 30 : 0;
  if (!scale || value > UINT64_MAX / scale) return false;  // 2^64 and more wrap to a small bound
  *bytes = value * scale;
  return true;
}

}  // namespace torchprobe

#endif  // TORCHPROBE_CLI_ARGS_H
