// The autograd probe set: the engine's per-node ranges as torch.profiler
// shows them, found in libtorch_cpu (1.13 and 2.x export all of it):
//  - `autograd::engine::evaluate_function: AddmmBackward0`: the engine's
//    RECORD_FUNCTION around Engine::evaluate_function(graph_task, Node* func,
//    ...), so that function itself is probed; which node it runs is read at
//    entry, the word at `func` (its vtable pointer), and named in userspace
//    from the vtable's symbol (model/autograd_model);
//  - `AddmmBackward0`, `torch::autograd::AccumulateGrad`: Node::operator()'s
//    range around the node's virtual apply(variable_list&&). operator() is
//    inline, so each class's apply is probed, named from its symbol.
// Node::name() is what both show: the class name for generated nodes (they
// override it), the demangled qualified name for the others (AccumulateGrad,
// CopySlices, GraphRoot). A custom Python Function's node is a
// torch::autograd::PyNode whose name() is its Python class: read from the
// target as discover/py_node.h says; where it cannot be, it is shown as
// torch::autograd::PyNode (counted).
// Both are OpProbes of libtorch's op set: same returns, same exception safety.
#ifndef TORCHPROBE_DISCOVER_AUTOGRAD_PROBES_H
#define TORCHPROBE_DISCOVER_AUTOGRAD_PROBES_H

#include <optional>
#include <string>
#include <string_view>

#include "userspace/discover/op_probes.h"

namespace torchprobe {

class ElfImage;
class ReturnSiteFinder;

// What the profiler puts before the node's name.
inline constexpr std::string_view kEvaluateFunctionPrefix = "autograd::engine::evaluate_function: ";
// The evaluate-function probe's own name: shown when its node cannot be named.
inline constexpr std::string_view kUnnamedNode = "autograd::engine::evaluate_function: (node unread)";
// The C++ class of a Python custom Function's node (named by its Python class).
inline constexpr std::string_view kPyNodeClass = "torch::autograd::PyNode";

// Node::name() of the class `qualified` ("torch::autograd::generated::
// AddmmBackward0" -> "AddmmBackward0"; others unchanged).
std::string NodeName(std::string_view qualified);
// The node name of a demangled vtable symbol ("vtable for X"), or nullopt.
std::optional<std::string> NodeNameOfVtable(std::string_view demangled);
// The node name for a mangled torch::autograd::...::apply(variable_list&&)
// symbol, or nullopt for any other symbol.
std::optional<std::string> NodeApplyName(std::string_view mangled);

// Appends Engine::evaluate_function (entered with its node's vtable,
// kAutogradNodeEntry) and every node class's apply to `set`.
void AppendAutogradProbes(const ElfImage& image, const ReturnSiteFinder& returns, OpProbeSet* set);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_AUTOGRAD_PROBES_H
