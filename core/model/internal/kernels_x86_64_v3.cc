// The kernels (core/model/internal/kernels.h) for x86-64-v3 (AVX2, FMA): compiled with
// -march=x86-64-v3 (core/CMakeLists.txt), in a namespace of their own, with Eigen's renamed (Note
// [Kernels per instruction set, Eigen] in kernels.cc).
#define TESSERA_KERNELS_NS x86_64_v3
#define TESSERA_KERNELS_ISA "x86-64-v3"
#define Eigen tessera_eigen_x86_64_v3
#include "core/model/internal/kernels_impl.inc"
