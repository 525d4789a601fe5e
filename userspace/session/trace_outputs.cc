#include "userspace/session/trace_outputs.h"

#include <vector>

#include "userspace/export/chrome_trace_writer.h"
#include "userspace/export/execution_trace_writer.h"
#include "userspace/export/perfetto_writer.h"
#include "userspace/session/window_schedule.h"

namespace torchprobe {

namespace {

template <typename Writer>
bool AddOutput(const std::string& path, int64_t number, TraceFanout* outputs, std::string* error) {
  if (path.empty()) return true;
  std::unique_ptr<Writer> writer = Writer::Open(number < 0 ? path : NumberedPath(path, number), error);
  if (!writer) return false;
  outputs->Add(std::move(writer));
  return true;
}

}  // namespace

StatusOr<std::unique_ptr<TraceFanout>> OpenTraceOutputs(const RecordOptions& options, int64_t number) {
  auto outputs = std::make_unique<TraceFanout>();
  std::string error;
  if (!options.output.empty()) {
    std::unique_ptr<PerfettoWriter> perfetto = PerfettoWriter::Open(
        number < 0 ? options.output : NumberedPath(options.output, number), &error,
        {.compress = options.compress});
    if (!perfetto) return Status::Error(error);
    outputs->Add(std::move(perfetto));
  }
  if (!AddOutput<ExecutionTraceWriter>(options.et_output, number, outputs.get(), &error) ||
      !AddOutput<ChromeTraceWriter>(options.chrome_output, number, outputs.get(), &error))
    return Status::Error(error);  // the ones already open are removed with `outputs`
  return outputs;
}

std::string DescribeTraceOutputs(const RecordOptions& options, bool numbered) {
  std::vector<std::string> paths;
  for (const std::string* path : {&options.output, &options.et_output, &options.chrome_output})
    if (!path->empty()) paths.push_back(numbered ? NumberedPath(*path, "N") : *path);
  std::string text;
  for (size_t i = 0; i < paths.size(); ++i)
    text += (i == 0 ? "" : i + 1 == paths.size() ? " and " : ", ") + paths[i];
  return text;
}

}  // namespace torchprobe
