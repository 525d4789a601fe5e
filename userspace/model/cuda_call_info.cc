// Argument places per probed CUDA/NCCL signature; see the header. A by-value
// dim3 (12 bytes) takes two registers: {x, y} and then {z}.
#include "userspace/model/cuda_call_info.h"

#include <cstdio>
#include <string>

namespace torchprobe {
namespace {

// ncclDataType_t -> bytes per element (ncclInt8 ... ncclFloat8e5m2).
constexpr uint64_t kNcclElementBytes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2, 1, 1};

void SetDims(uint32_t* dims, uint64_t xy, uint64_t z) {
  dims[0] = static_cast<uint32_t>(xy);
  dims[1] = static_cast<uint32_t>(xy >> 32);
  dims[2] = static_cast<uint32_t>(z);
}

void SetNccl(CudaCallInfo* info, uint64_t count, uint64_t datatype) {
  info->count = count;
  info->datatype = static_cast<int64_t>(static_cast<int32_t>(datatype));
  if (info->datatype >= 0 && static_cast<size_t>(info->datatype) < std::size(kNcclElementBytes)) {
    info->bytes = count * kNcclElementBytes[info->datatype];
    info->has_bytes = true;
  }
}

void SetStream(CudaCallInfo* info, uint64_t stream) {
  info->stream = stream;
  info->has_stream = true;
}

std::string Hex(uint64_t value) {
  char text[24];
  std::snprintf(text, sizeof(text), "0x%llx", static_cast<unsigned long long>(value));
  return text;
}

}  // namespace

CudaCallInfo DecodeCudaCall(std::string_view call, const tp_cuda_call_event& event) {
  if (call.ends_with("_ptsz")) call.remove_suffix(5);
  const __u64* r = event.regs;
  const __u64* s = event.stack;
  CudaCallInfo info;
  info.known = true;
  auto signed32 = [](uint64_t v) { return static_cast<int64_t>(static_cast<int32_t>(v)); };
  if (call == "cudaLaunchKernel") {
    // (const void* func, dim3 grid, dim3 block, void** args, size_t shared, cudaStream_t)
    info.function = r[0];
    info.host_stub = true;
    SetDims(info.grid, r[1], r[2]);
    SetDims(info.block, r[3], r[4]);
    info.has_dims = true;
    info.shared_mem = s[0];
    SetStream(&info, s[1]);
  } else if (call == "cudaLaunchKernelExC" || call == "cuLaunchKernelEx") {
    // (const config*, func, args...): the dims and stream are behind the pointer
    info.function = r[1];
    info.host_stub = call == "cudaLaunchKernelExC";
  } else if (call == "cuLaunchKernel") {
    // (CUfunction, gx, gy, gz, bx, by, bz, shared, CUstream, params, extra)
    info.function = r[0];
    info.grid[0] = r[1], info.grid[1] = r[2], info.grid[2] = r[3];
    info.block[0] = r[4], info.block[1] = r[5], info.block[2] = s[0];
    info.has_dims = true;
    info.shared_mem = static_cast<uint32_t>(s[1]);
    SetStream(&info, s[2]);
  } else if (call == "cudaMemcpyAsync") {  // (dst, src, count, kind, stream)
    info.bytes = r[2];
    info.has_bytes = true;
    info.copy_kind = signed32(r[3]);
    SetStream(&info, r[4]);
  } else if (call == "cudaMemsetAsync") {  // (dst, value, count, stream)
    info.bytes = r[2];
    info.has_bytes = true;
    SetStream(&info, r[3]);
  } else if (call == "cudaGraphLaunch") {  // (graphExec, stream)
    SetStream(&info, r[1]);
  } else if (call == "cudaStreamSynchronize") {  // (stream)
    SetStream(&info, r[0]);
  } else if (call == "cudaEventSynchronize") {  // (event)
    info.event = r[0];
  } else if (call == "cudaStreamWaitEvent") {  // (stream, event, flags)
    SetStream(&info, r[0]);
    info.event = r[1];
  } else if (call == "cudaDeviceSynchronize") {
  } else if (call == "ncclAllReduce" || call == "ncclReduceScatter") {
    // (send, recv, count, datatype, op, comm, stream)
    SetNccl(&info, r[2], r[3]);
    info.comm = r[5];
    SetStream(&info, s[0]);
  } else if (call == "ncclBroadcast") {  // (send, recv, count, datatype, root, comm, stream)
    SetNccl(&info, r[2], r[3]);
    info.peer = signed32(r[4]);
    info.comm = r[5];
    SetStream(&info, s[0]);
  } else if (call == "ncclReduce") {  // (send, recv, count, datatype, op, root, comm, stream)
    SetNccl(&info, r[2], r[3]);
    info.peer = signed32(r[5]);
    info.comm = s[0];
    SetStream(&info, s[1]);
  } else if (call == "ncclAllGather") {  // (send, recv, sendcount, datatype, comm, stream)
    SetNccl(&info, r[2], r[3]);
    info.comm = r[4];
    SetStream(&info, r[5]);
  } else if (call == "ncclSend" || call == "ncclRecv") {  // (buf, count, datatype, peer, comm, stream)
    SetNccl(&info, r[1], r[2]);
    info.peer = signed32(r[3]);
    info.comm = r[4];
    SetStream(&info, r[5]);
  } else {
    info.known = false;
  }
  return info;
}

SliceArgs CudaCallArgs(const CudaCallInfo& info, const std::string& kernel) {
  SliceArgs args;
  if (!info.known) return args;
  auto number = [&](const char* name, uint64_t value) { args.push_back({name, false, "", value}); };
  auto text = [&](const char* name, std::string value) { args.push_back({name, true, std::move(value), 0}); };
  if (!kernel.empty()) text("kernel", kernel);
  if (info.function) text("function", Hex(info.function));
  if (info.has_dims) {
    text("grid", "[" + std::to_string(info.grid[0]) + ", " + std::to_string(info.grid[1]) + ", " +
                     std::to_string(info.grid[2]) + "]");
    text("block", "[" + std::to_string(info.block[0]) + ", " + std::to_string(info.block[1]) + ", " +
                      std::to_string(info.block[2]) + "]");
    number("shared memory", info.shared_mem);
  }
  if (info.has_stream) text("stream", Hex(info.stream));
  if (info.has_bytes) number("bytes", info.bytes);
  if (info.copy_kind >= 0) number("copy kind", static_cast<uint64_t>(info.copy_kind));
  if (info.datatype >= 0) {
    number("count", info.count);
    number("datatype", static_cast<uint64_t>(info.datatype));
  }
  if (info.peer >= 0) number("peer", static_cast<uint64_t>(info.peer));
  if (info.comm) text("comm", Hex(info.comm));
  if (info.event) text("event", Hex(info.event));
  return args;
}

}  // namespace torchprobe
