// TensorImpl field offsets from libc10, and reading them back; see the header.
#include "userspace/discover/tensor_layout.h"

#include <algorithm>
#include <cstring>
#include <iterator>

#include "userspace/base/remote_memory.h"
#include "userspace/base/scalar_types.h"

namespace torchprobe {

namespace {

constexpr const char* kDimCustom = "_ZNK3c1010TensorImpl10dim_customEv";
constexpr uint64_t kDimCustomScan = 256;  // bytes of the function searched

}  // namespace

TensorLayout LayoutFromSizesAndStrides(uint32_t sizes_and_strides) {
  TensorLayout layout;
  layout.sizes_and_strides = sizes_and_strides;
  // size_ (8), the inline sizes and strides (2 x 5 x 8): then the fields.
  layout.storage_offset = sizes_and_strides + 8 + 2 * TensorLayout::kMaxInlineDims * 8;
  layout.numel = layout.storage_offset + 8;
  layout.dtype = layout.numel + 8;
  layout.storage = sizes_and_strides >= 64 ? sizes_and_strides - 48 : 0;
  return layout;
}

std::optional<TensorLayout> LayoutFromDimCustom(std::string_view code) {
  // mov disp8(%rdi),%rax (48 8b 47 XX) or disp32 (48 8b 87 XX XX XX XX),
  // then pop %rbx (5b), ret (c3): the inline path's `return size_`.
  for (size_t i = 0; i + 6 <= code.size(); ++i) {
    if (code[i] != '\x48' || code[i + 1] != '\x8b') continue;
    uint32_t disp = 0;
    size_t end = 0;
    if (code[i + 2] == '\x47') {
      disp = static_cast<uint8_t>(code[i + 3]);
      end = i + 4;
    } else if (code[i + 2] == '\x87' && i + 9 <= code.size()) {
      std::memcpy(&disp, code.data() + i + 3, 4);
      end = i + 7;
    } else {
      continue;
    }
    if (end + 2 <= code.size() && code[end] == '\x5b' && code[end + 1] == '\xc3' && disp % 8 == 0 && disp < 4096)
      return LayoutFromSizesAndStrides(disp);
  }
  return std::nullopt;
}

std::optional<TensorLayout> DeriveTensorLayout(const ElfImage& libc10) {
  std::optional<TensorLayout> layout;
  libc10.ForEachSymbol([&](const ElfSymbol& s) {
    if (!layout && s.name == kDimCustom && s.size > 0)
      layout = LayoutFromDimCustom(libc10.BytesAt(s.vaddr, std::min<uint64_t>(s.size, kDimCustomScan)));
  });
  return layout;
}

std::optional<TensorMeta> ReadTensorMeta(pid_t pid, uint64_t impl, const TensorLayout& layout) {
  constexpr uint32_t kInline = TensorLayout::kMaxInlineDims;
  struct {
    uint64_t dims;
    int64_t inline_storage[2 * kInline];
  } sas;
  TensorMeta meta;
  if (!ReadRemote(pid, impl + layout.sizes_and_strides, &sas, sizeof(sas)) ||
      !ReadRemote(pid, impl + layout.storage_offset, &meta.storage_offset, 8) ||
      !ReadRemote(pid, impl + layout.numel, &meta.numel, 8) || !ReadRemote(pid, impl + layout.dtype, &meta.dtype, 2))
    return std::nullopt;
  if (sas.dims > kMaxTensorDims) return std::nullopt;
  size_t dims = sas.dims;
  std::vector<int64_t> both(2 * dims);
  if (dims <= kInline) {
    // Inline: sizes in [0, 5), strides in [5, 10).
    for (size_t d = 0; d < dims; ++d) {
      both[d] = sas.inline_storage[d];
      both[dims + d] = sas.inline_storage[kInline + d];
    }
  } else if (!ReadRemote(pid, static_cast<uint64_t>(sas.inline_storage[0]), both.data(), both.size() * 8)) {
    return std::nullopt;  // out of line: a pointer to sizes then strides
  }
  meta.sizes.assign(both.begin(), both.begin() + static_cast<long>(dims));
  meta.strides.assign(both.begin() + static_cast<long>(dims), both.end());
  for (int64_t size : meta.sizes)
    if (size < 0) return std::nullopt;
  // Where BPF reads them too (bpf/shapes.bpf.c read_identity).
  uint64_t storage = 0, counter = 0;
  if (layout.storage && ReadRemote(pid, impl + layout.storage, &storage, 8) && storage)
    ReadRemote(pid, storage + layout.storage, &meta.storage_data, 8);
  if (layout.storage && ReadRemote(pid, impl + layout.storage + TensorLayout::kVersionAfterStorage, &counter, 8) &&
      counter)
    ReadRemote(pid, counter + layout.storage, &meta.version, 4);
  return meta;
}

std::string ScalarTypeName(uint16_t dtype) { return ScalarTypeCaffe2Name(dtype); }

}  // namespace torchprobe
