// The files one `record` writes (-o Perfetto, --et, --chrome), opened
// together before anything is attached, so a bad path for any of them is one
// line and no probe; fed by one model through a TraceFanout.
#ifndef TORCHPROBE_SESSION_TRACE_OUTPUTS_H
#define TORCHPROBE_SESSION_TRACE_OUTPUTS_H

#include <memory>
#include <string>

#include "userspace/base/status.h"
#include "userspace/export/trace_fanout.h"
#include "userspace/session/record_session.h"

namespace torchprobe {

// `number` >= 0: the files of that capture window, "out.N.ext" (NumberedPath).
StatusOr<std::unique_ptr<TraceFanout>> OpenTraceOutputs(const RecordOptions& options, int64_t number = -1);

// "a.pftrace, a.et.json and a.json": what the summary line says was written;
// `numbered`: one set per window, "a.N.pftrace, ...".
std::string DescribeTraceOutputs(const RecordOptions& options, bool numbered = false);

}  // namespace torchprobe

#endif  // TORCHPROBE_SESSION_TRACE_OUTPUTS_H
