// The kernels (core/model/internal/kernels.h) compiled with the library's own flags: the x86-64
// baseline in a portable build, the build machine's CPU in a TESSERA_NATIVE one.
#define TESSERA_KERNELS_NS baseline
#define TESSERA_KERNELS_ISA "baseline"
#include "core/model/internal/kernels_impl.inc"
