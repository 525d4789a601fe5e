// Where a c10::TensorImpl keeps its shape, strides, storage offset and dtype
// (the second step of tensor metadata; BPF does not read them yet). The
// offsets differ by version (1.13 has one more field before them than 2.x:
// all shift by 8), so they are derived from libc10 itself: the fast path of
// `c10::TensorImpl::dim_custom() const` returns sizes_and_strides_.size_,
// `mov OFF(%rdi),%rax; pop %rbx; ret`, and the fields after it keep their
// order in every version we know. Checked against live tensors of 1.13 and
// 2.6 by the tests (ReadTensorMeta, the same reads BPF is to make).
#ifndef TORCHPROBE_DISCOVER_TENSOR_LAYOUT_H
#define TORCHPROBE_DISCOVER_TENSOR_LAYOUT_H

#include <sys/types.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "userspace/discover/elf_symbols.h"

namespace torchprobe {

struct TensorLayout {
  // c10::impl::SizesAndStrides: size_t size_, then sizes and strides inline
  // (kMaxInlineDims each) or, past that, a pointer to 2 x size_ int64s.
  uint32_t sizes_and_strides = 0;
  uint32_t storage_offset = 0;  // int64_t storage_offset_
  uint32_t numel = 0;           // int64_t numel_
  uint32_t dtype = 0;           // caffe2::TypeMeta: uint16_t index == c10::ScalarType
  // The size of an intrusive_ptr_target (vptr and two counts: 24 in 1.13,
  // 16 in 2.x), which is where TensorImpl::storage_ is, and the data
  // pointer in a StorageImpl, and the count in a VersionCounter;
  // version_counter_ is kVersionAfterStorage past storage_. In every
  // version: storage_, autograd_meta_, named_tensor_meta_, version_counter_,
  // the Python object's two words, then sizes_and_strides_ (48 past storage_).
  uint32_t storage = 0;
  static constexpr uint32_t kVersionAfterStorage = 24;
  static constexpr uint32_t kMaxInlineDims = 5;  // C10_SIZES_AND_STRIDES_MAX_INLINE_SIZE
};

// The layout whose SizesAndStrides begins at `sizes_and_strides`.
TensorLayout LayoutFromSizesAndStrides(uint32_t sizes_and_strides);

// From libc10's dim_custom (see the top); nullopt when the symbol or its
// pattern is not there (then no tensor metadata is read, and that is said).
std::optional<TensorLayout> DeriveTensorLayout(const ElfImage& libc10);
// Same on the code bytes of dim_custom alone (tests).
std::optional<TensorLayout> LayoutFromDimCustom(std::string_view code);

inline constexpr uint32_t kMaxTensorDims = 16;  // more are not read (cut, said)

struct TensorMeta {
  std::vector<int64_t> sizes;
  std::vector<int64_t> strides;
  int64_t storage_offset = 0;
  int64_t numel = 0;
  uint16_t dtype = 0;  // c10::ScalarType
  uint64_t storage_data = 0;  // its storage's data pointer (0: none)
  uint32_t version = 0;       // its version counter
};

// Reads the TensorImpl at `impl` in process `pid` (process_vm_readv: bounded,
// read-only); nullopt when unreadable or not plausible (dims past
// kMaxTensorDims, a negative size).
std::optional<TensorMeta> ReadTensorMeta(pid_t pid, uint64_t impl, const TensorLayout& layout);

// c10::ScalarType -> the type name the execution trace puts in
// "Tensor(<name>)" and Kineto in "Input type" ("float", "long int"); "" when
// not known.
std::string ScalarTypeName(uint16_t dtype);

}  // namespace torchprobe

#endif  // TORCHPROBE_DISCOVER_TENSOR_LAYOUT_H
