// Text helpers shared by the report's sections, so that a time or a share
// reads the same in the overview and in every table.
#ifndef TORCHPROBE_REPORT_TEXT_FORMAT_H
#define TORCHPROBE_REPORT_TEXT_FORMAT_H

#include <cstddef>
#include <cstdint>
#include <string>

namespace torchprobe {

// torch.autograd.profiler_util._format_time, from nanoseconds:
// "0.600us", "20.353ms", "2.467s".
std::string FormatTime(uint64_t ns);

// Bytes as "512 B", "1.5 KiB", "2.00 MiB", "1.25 GiB".
std::string FormatBytes(uint64_t bytes);

// part / total as "40.00%"; "NaN" when total is 0, as torch prints it.
std::string FormatShare(uint64_t part, uint64_t total);

// `s` right-aligned in `width` columns (never cut).
std::string PadLeft(const std::string& s, size_t width);

// `s` left-aligned in `width` columns (never cut).
std::string PadRight(const std::string& s, size_t width);

// `s` made safe for one line of at most `width` bytes: control characters
// (a newline in a -c script's argv) become spaces, and a longer text is cut
// to end in "...", never inside a UTF-8 sequence.
std::string OneLine(const std::string& s, size_t width);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_TEXT_FORMAT_H
