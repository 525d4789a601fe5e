// Collective slice arguments from their entry's reads; see the header.
#include "userspace/model/collective_args.h"

#include <cstdint>
#include <cstdio>
#include <iterator>
#include <string>

namespace torchprobe {
namespace {

// Ops whose first argument after the group is the tensor list, in both
// c10d::ops (1.x: ArrayRef) and ProcessGroupGloo (2.x: std::vector&).
constexpr std::string_view kTensorListFirst[] = {"c10d::allreduce_", "c10d::broadcast_",
                                                 "c10d::reduce_", "c10d::send", "c10d::recv_"};

// Element sizes by c10::ScalarType, which is a scalar type's TypeMeta
// index: Byte, Char, Short, Int, Long, Half, Float, Double, ComplexHalf,
// ComplexFloat, ComplexDouble, Bool, QInt8, QUInt8, QInt32, BFloat16
// (the same in 1.13 and 2.6; later ones are left unsized).
constexpr uint64_t kItemSize[] = {1, 1, 2, 4, 8, 2, 4, 8, 4, 8, 16, 1, 1, 1, 4, 2};

// More than any job's process count: a larger one is not a group's size.
constexpr int32_t kMaxGroupSize = 1 << 20;

}  // namespace

SliceArgs CollectiveArgs(std::string_view op, const tp_collective_event& event) {
  SliceArgs args;
  uint64_t group = event.group;
  int32_t rank = event.rank;
  int32_t size = event.group_size;
  if (group != 0 && size > 0 && size <= kMaxGroupSize && rank >= 0 && rank < size) {
    char address[24];
    std::snprintf(address, sizeof(address), "0x%llx", static_cast<unsigned long long>(group));
    args.push_back({"process_group", true, address, 0});
    args.push_back({"rank", false, "", static_cast<uint64_t>(rank)});
    args.push_back({"group_size", false, "", static_cast<uint64_t>(size)});
  }
  for (std::string_view name : kTensorListFirst) {
    // A list longer than the group's worth of devices is no list: unread.
    if (name != op || event.tensors == 0 || event.tensors > TP_COLLECTIVE_MAX_TENSORS) continue;
    args.push_back({"tensors", false, "", event.tensors});
    // Summed in BPF; bytes only when every tensor has one dtype.
    if (event.one_dtype && event.dtype < std::size(kItemSize))
      args.push_back({"bytes", false, "", event.numel * kItemSize[event.dtype]});
  }
  return args;
}

}  // namespace torchprobe
