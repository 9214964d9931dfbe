#!/usr/bin/env bash
# Fails when a kernel compiled for a wider instruction set than the library's defines an external
# symbol another translation unit could also define: the linker would keep one copy, and a caller
# compiled for the baseline could run AVX-512 code (Note [Kernels per instruction set, Eigen] in
# core/model/internal/kernels.cc). Every external symbol of kernels_x86_64_v<L>.cc.o must lie
# in its own namespaces (tessera::kernels::x86_64_v<L>, the renamed tessera_eigen_x86_64_v<L>),
# but for DW.ref.__gxx_personality_v0: a pointer to the C++ exception personality routine, the
# same data in every unit, no code.
#   check_kernel_symbols.sh LIBTESSERA_CORE.A [LEVEL...]   # LEVELs compiled in, e.g. 3 4
set -euo pipefail
library=$1
shift
status=0
for level in "$@"; do
  member=kernels_x86_64_v$level.cc.o
  symbols=$(nm -g -C --defined-only -A "$library" | grep -F ":$member:" | cut -d: -f3- || true)
  if [ -z "$symbols" ]; then
    echo "kernel symbols: $member defines nothing in $library (not compiled in?)"
    status=1
    continue
  fi
  stray=$(grep -v -e "tessera::kernels::x86_64_v$level::" -e "tessera_eigen_x86_64_v$level::" \
            -e " V DW.ref.__gxx_personality_v0$" <<<"$symbols" || true)
  if [ -n "$stray" ]; then
    echo "kernel symbols: $member defines symbols outside its namespaces:"
    echo "$stray"
    status=1
  else
    echo "kernel symbols: $member: $(wc -l <<<"$symbols") external symbols, all its own"
  fi
done
[ $# -gt 0 ] || echo "kernel symbols: no kernel for a wider instruction set in this build"
exit $status
