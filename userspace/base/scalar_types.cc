// c10::ScalarType's sizes and names; see the header.
#include "userspace/base/scalar_types.h"

#include <iterator>

namespace torchprobe {

namespace {

// c10::ScalarType's order; the names are caffe2::TypeMeta's (GCC's spelling
// of the C++ type), as the profiler and the execution trace print them.
struct ScalarTypeInfo {
  const char* name;
  uint32_t size;
};
constexpr ScalarTypeInfo kScalarTypes[] = {
    {"unsigned char", 1}, {"signed char", 1}, {"short int", 2}, {"int", 4}, {"long int", 8},
    {"c10::Half", 2}, {"float", 4}, {"double", 8}, {"c10::complex<c10::Half>", 4},
    {"c10::complex<float>", 8}, {"c10::complex<double>", 16}, {"bool", 1}, {"c10::qint8", 1},
    {"c10::quint8", 1}, {"c10::qint32", 4}, {"c10::BFloat16", 2}};

}  // namespace

uint32_t ScalarTypeSize(uint16_t dtype) { return dtype < std::size(kScalarTypes) ? kScalarTypes[dtype].size : 0; }
const char* ScalarTypeCaffe2Name(uint16_t dtype) {
  return dtype < std::size(kScalarTypes) ? kScalarTypes[dtype].name : "";
}

}  // namespace torchprobe
