#!/usr/bin/env bash
# Fails when a folder includes a header of a folder it must not depend on (docs/design.md §2):
#   include/tessera (the public tree) <- every folder; examples include only it
#   core <- schema <- actors <- cluster <- coordinator <- cli
#   core <- http <- coordinator, cli (the HTTP server: plain sockets, no CAF)
#   core, schema, http <- serving <- cli (an exported model served: no CAF)
#   core <- workloads (the reference workloads: examples, cli and bench may use them)
# when core/ includes CAF, Cap'n Proto, kj or a generated *.capnp.h header; and when the public
# tree (include/tessera/) or an example reaches, through its includes, anything but the public
# tree and third-party headers (absl/, nlohmann/, Eigen, ...): an example is what a user copies.
set -u
cd "$(dirname "$0")/.."
status=0
report() { echo "layering violation: $1"; echo "$2"; status=1; }

bad=$(grep -rnE '#include[[:space:]]*[<"](caf/|capnp/|kj/)|\.capnp\.h' core 2>/dev/null)
[ -n "$bad" ] && report "core/ must not include CAF, Cap'n Proto, kj or generated headers" "$bad"

# The folders of this repository; an include starting with any other folder (absl/, nlohmann/,
# ...) is a third-party header.
project="core workloads http schema serving actors cluster coordinator examples cli bench tests fuzz"

check_allowed() {  # folder, then the project folders it may include
  local dir=$1; shift
  [ -d "$dir" ] || return 0
  for other in $project; do
    case " $* " in *" $other "*) continue ;; esac
    bad=$(grep -rnE "#include[[:space:]]*\"$other/" "$dir" 2>/dev/null)
    [ -n "$bad" ] && report "$dir/ must not include $other/ (it may include: $*)" "$bad"
  done
}
check_allowed core core
check_allowed workloads core workloads
check_allowed http core http
check_allowed schema core schema
check_allowed actors core schema actors
check_allowed cluster core schema actors cluster
check_allowed coordinator core http schema actors cluster coordinator
check_allowed serving core http schema serving
check_allowed cli core workloads http schema serving actors cluster coordinator cli
check_allowed bench core workloads http schema serving actors cluster coordinator bench
# The public tree (include/tessera/, the only headers installed) and the examples, which include
# only it, transitively (scripts/include_reach.py): nothing they reach is CAF, Cap'n Proto or a
# header outside include/tessera/, so a program built on them compiles without the library's
# tree and never sees an actor.
for file in $(find include/tessera -name '*.h' | sort) examples/*.cc; do
  [ -f "$file" ] || continue
  bad=$(python3 scripts/include_reach.py --list "$file" |
        awk '($1 == "project" && $2 !~ /^include\/tessera\//) || $1 == "caf" || $1 == "capnp" {
               print "  " $1 " " $2 }')
  [ -n "$bad" ] && report "$file reaches what is not the public tree through its includes" "$bad"
done

[ $status -eq 0 ] && echo "layering: ok (core <- schema <- actors <- cluster <- coordinator <-" \
  "cli; core, schema, http <- serving <- cli; core <- workloads; the public tree and the" \
  "examples reach only the public tree, transitively)"
exit $status
