#include "userspace/discover/calibration_op.h"

#include <elf.h>

#include <memory>
#include <optional>

#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/function_returns.h"
#include "userspace/discover/return_sites.h"

namespace torchprobe {

StatusOr<OpProbe> FindCalibrationOp() {
  const std::string path = "/proc/self/exe";
  StatusOr<std::unique_ptr<ElfImage>> image = ElfImage::Open(path);
  if (!image.ok()) return image.status();
  std::optional<ElfSymbol> symbol;
  (*image)->ForEachSymbol([&](const ElfSymbol& s) {
    if (!symbol && s.type == STT_FUNC && s.name == kCalibrationSymbol) symbol = s;
  });
  if (!symbol) return Status::Error("torchprobe's own binary has no symbol torchprobe_calibration_op (stripped?)");
  std::optional<uint64_t> offset = (*image)->FileOffset(symbol->vaddr);
  if (!offset) return Status::Error("torchprobe_calibration_op is not backed by its file");
  StatusOr<std::unique_ptr<ReturnSiteFinder>> finder = ReturnSiteFinder::Create();
  if (!finder.ok()) return finder.status();
  OpProbe probe{*offset, {}, kCalibrationSymbol, OpInfo{"torchprobe::calibration", "", ""}, true};
  probe.return_offsets = FindFunctionReturns(**image, **finder, *symbol).offsets;
  if (probe.return_offsets.empty()) return Status::Error("no `ret` found in torchprobe_calibration_op");
  return probe;
}

}  // namespace torchprobe
