// The kernels (core/model/internal/kernels.h) for x86-64-v4 (AVX-512): compiled with
// -march=x86-64-v4 (core/CMakeLists.txt), in a namespace of their own, with Eigen's renamed (Note
// [Kernels per instruction set, Eigen] in kernels.cc).
#define TESSERA_KERNELS_NS x86_64_v4
#define TESSERA_KERNELS_ISA "x86-64-v4"
#define Eigen tessera_eigen_x86_64_v4
#include "core/model/internal/kernels_impl.inc"
