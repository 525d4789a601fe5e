// Whether the running kernel has a function, by name, in its BTF: a walk of
// the raw type section, no index built.
#pragma once

#include <string>
#include <string_view>

namespace torchprobe {

// 1 the kernel's BTF names a function `name` (BTF_KIND_FUNC), 0 it does not,
// -1 its BTF could not be read or holds a kind this walk does not know.
// libbpf's btf__load_vmlinux_btf answers the same but validates and indexes
// every type first: ~150 ms here, paid again by the object load, and every
// record (each agent window, each trigger) asked once.
int KernelBtfHasFunc(std::string_view name, const std::string& path = "/sys/kernel/btf/vmlinux");

}  // namespace torchprobe
