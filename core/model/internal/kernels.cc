#include "core/model/internal/kernels.h"

#include <cstdlib>
#include <string>

#include "absl/strings/str_join.h"
#include "core/base/logging.h"

// Note [Kernels per instruction set, Eigen]
// A portable build compiles for the x86-64 baseline (SSE2): Eigen multiplies 4 floats at a time
// without fused multiply-adds, and GCC vectorizes loops 4 floats wide (a ReLU's select not at
// all). Measured on the dev machine's EPYC (bench/README.md, "Portable builds"), the local
// trainer ran recsys at 0.51-0.58x the speed of a -march=native build with everything on the
// baseline; with the dense layers' products dispatched (~2.7x faster with AVX-512) at 0.69x; perf
// put the rest in the Adagrad update of the gathered rows (~2x the native samples) and ReLU's
// backward (~20x). With those dispatched too, at 1.04x. So these kernels (kernels_impl.inc) are
// compiled three times — kernels_baseline.cc with the library's flags, kernels_x86_64_v3.cc with
// -march=x86-64-v3, kernels_x86_64_v4.cc with -march=x86-64-v4 — and the first call picks the
// widest the CPU runs (GCC's __builtin_cpu_supports checks the CPU's and the OS's support for
// every feature of the level). Adam (Fashion-MNIST's optimizer) has the same shape as Adagrad
// and is there too; SGD, momentum and FTRL stay on the baseline.
//
// Eigen picks its vector code by preprocessor macros, so GCC's target_clones (which the
// initializers use, Note [Kernels per instruction set] in core/variables/initializer.cc) cannot
// widen it: each instruction set needs a translation unit of its own. That alone would be unsafe:
// Eigen's templates and inline functions compiled in an AVX-512 unit have the same names as those
// the rest of the library compiles for the baseline, the linker keeps one copy of each, and a
// baseline caller could land in AVX-512 code on a CPU without it. So each wider unit renames
// Eigen's namespace (`#define Eigen tessera_eigen_x86_64_v4` before including it) and includes
// nothing else with a body: every function it defines has a name of its own.
// scripts/check_kernel_symbols.sh (in the test suite) fails when one of these units defines an
// external symbol outside its own namespaces. A TESSERA_NATIVE build compiles the baseline unit for
// the build machine and no other.
//
// The variants round differently (FMA), so a product's or an update's last bits depend on the
// CPU, as they did with -march=native; initial values do not (core/variables/initializer.cc).

namespace tessera::kernels {
namespace baseline {
extern const Kernels kKernels;
}
#ifdef TESSERA_KERNELS_X86_64_V3
namespace x86_64_v3 {
extern const Kernels kKernels;
}
#endif
#ifdef TESSERA_KERNELS_X86_64_V4
namespace x86_64_v4 {
extern const Kernels kKernels;
}
#endif

std::vector<const Kernels*> RunnableKernels() {
  std::vector<const Kernels*> runnable = {&baseline::kKernels};
#if defined(TESSERA_KERNELS_X86_64_V3) || defined(TESSERA_KERNELS_X86_64_V4)
  __builtin_cpu_init();
#endif
#ifdef TESSERA_KERNELS_X86_64_V3
  if (__builtin_cpu_supports("x86-64-v3")) runnable.push_back(&x86_64_v3::kKernels);
#endif
#ifdef TESSERA_KERNELS_X86_64_V4
  if (__builtin_cpu_supports("x86-64-v4")) runnable.push_back(&x86_64_v4::kKernels);
#endif
  return runnable;
}

const Kernels& PickKernels(const char* wanted) {
  const std::vector<const Kernels*> runnable = RunnableKernels();
  if (wanted == nullptr || *wanted == '\0') return *runnable.back();
  for (const Kernels* kernels : runnable) {
    if (std::string(kernels->isa) == wanted) return *kernels;
  }
  Log().warn("TESSERA_KERNELS={}: not among the kernels this build and CPU run ({}); using {}",
             wanted,
             absl::StrJoin(runnable, ", ",
                           [](std::string* out, const Kernels* k) { out->append(k->isa); }),
             runnable.back()->isa);
  return *runnable.back();
}

const Kernels& ChosenKernels() {
  static const Kernels& chosen = PickKernels(std::getenv("TESSERA_KERNELS"));
  return chosen;
}

}  // namespace tessera::kernels
