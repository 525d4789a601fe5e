// Reads torchprobe's JSON traces back into the DecodedTrace that `report`
// prints, so the table is the same whatever format was written:
//  - Kineto-style Chrome JSON (--chrome): `ph:"X"` events per pid/tid, nested
//    by their times; process and thread names from the `ph:"M"` events;
//  - execution trace JSON (--et): op nodes nested by ctrl_deps under their
//    thread nodes. It has no times: calls and nesting only, all times 0.
// The "torchprobe_stats" object of either becomes the stats.
#ifndef TORCHPROBE_REPORT_JSON_TRACE_READER_H
#define TORCHPROBE_REPORT_JSON_TRACE_READER_H

#include <string>

#include "userspace/report/trace_reader.h"

namespace torchprobe {

// True if the file at `path` starts (after whitespace) with '{': a JSON trace.
bool LooksLikeJson(const std::string& path);

// Returns false with a one-line *error for an unreadable file, JSON that does
// not parse, or JSON that is neither of our formats.
bool ReadJsonTrace(const std::string& path, DecodedTrace* trace, std::string* error);

}  // namespace torchprobe

#endif  // TORCHPROBE_REPORT_JSON_TRACE_READER_H
