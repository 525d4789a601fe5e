// c10::ScalarType (a Tensor's dtype, as its TypeMeta index) by number: what
// discover reads from a target and the model writes into a slice's inputs.
#ifndef TORCHPROBE_BASE_SCALAR_TYPES_H
#define TORCHPROBE_BASE_SCALAR_TYPES_H

#include <cstdint>

namespace torchprobe {

// Bytes per element of a c10::ScalarType; 0 when not known.
uint32_t ScalarTypeSize(uint16_t dtype);
// Its caffe2 name, as the profiler and the execution trace print it
// ("float", "long int"); "" when not known.
const char* ScalarTypeCaffe2Name(uint16_t dtype);

}  // namespace torchprobe

#endif  // TORCHPROBE_BASE_SCALAR_TYPES_H
