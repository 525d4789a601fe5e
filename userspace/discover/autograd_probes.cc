// Autograd's engine and node functions by their mangled names; see the header.
#include "userspace/discover/autograd_probes.h"

#include "bpf/events.h"
#include "userspace/base/demangle.h"
#include "userspace/discover/address_symbols.h"
#include "userspace/discover/elf_symbols.h"
#include "userspace/discover/named_probes.h"
#include "userspace/discover/py_node.h"

namespace torchprobe {
namespace {

// torch::autograd::Engine::evaluate_function(std::shared_ptr<GraphTask>&,
// Node*, InputBuffer&, std::shared_ptr<ReadyQueue> const&), 1.13 and 2.x.
constexpr std::string_view kEvaluateFunction =
    "_ZN5torch8autograd6Engine17evaluate_functionERSt10shared_ptrINS0_9GraphTaskEEPNS0_4NodeERNS0_11InputBufferERKS2_INS0_10ReadyQueueEE";
constexpr std::string_view kGeneratedPrefix = "torch::autograd::generated::";
constexpr std::string_view kVtablePrefix = "vtable for ";
// Cheap filters before demangling: a torch::autograd class's apply taking a
// std::vector<at::Tensor>&& (variable_list), then the demangled suffix.
constexpr std::string_view kMangledPrefix = "_ZN5torch8autograd";
constexpr std::string_view kMangledApply = "5applyEOSt6vectorIN2at6TensorE";
constexpr std::string_view kApplySuffix = "::apply(std::vector<at::Tensor, std::allocator<at::Tensor> >&&)";

}  // namespace

std::string NodeName(std::string_view qualified) {
  if (qualified.starts_with(kGeneratedPrefix)) qualified.remove_prefix(kGeneratedPrefix.size());
  return std::string(qualified);
}

std::optional<std::string> NodeNameOfVtable(std::string_view demangled) {
  if (!demangled.starts_with(kVtablePrefix)) return std::nullopt;
  return NodeName(demangled.substr(kVtablePrefix.size()));
}

std::optional<std::string> NodeApplyName(std::string_view mangled) {
  if (!mangled.starts_with(kMangledPrefix) || mangled.find(kMangledApply) == std::string_view::npos)
    return std::nullopt;
  std::string demangled = DemangleSymbol(std::string(mangled));
  if (!demangled.ends_with(kApplySuffix)) return std::nullopt;
  return NodeName(std::string_view(demangled).substr(0, demangled.size() - kApplySuffix.size()));
}

void AppendAutogradProbes(const ElfImage& image, const ReturnSiteFinder& returns, OpProbeSet* set) {
  size_t first = set->probes.size();
  AppendNamedProbes(image, returns,
                    [](const ElfSymbol& symbol) -> std::optional<std::string> {
                      if (symbol.name == kEvaluateFunction) return std::string(kUnnamedNode);
                      return NodeApplyName(symbol.name);
                    },
                    set);
  // Its entry goes through the raw-arguments program, which reads the vtable
  // word of the node (rdx, the third argument after `this`).
  // A Python Function's node is named by its Python object's type: where
  // PyNode keeps that object, from the libtorch_python beside this image.
  std::optional<uint32_t> object_offset;
  std::string python = LibtorchPythonBeside(image.path());
  if (!python.empty()) {
    StatusOr<std::unique_ptr<ElfImage>> python_image = ElfImage::Open(python);
    if (python_image.ok()) object_offset = FindPyNodeObjectOffset(**python_image);
  }
  for (size_t i = first; i < set->probes.size(); ++i) {
    OpProbe& probe = set->probes[i];
    probe.op.category = kAutogradNode;
    if (probe.symbol != kEvaluateFunction) continue;
    probe.collective_layout = kAutogradNodeEntry;
    probe.node_object_offset = object_offset.value_or(0);
  }
}

}  // namespace torchprobe
