#!/usr/bin/env bash
# Fails when a folder includes a header of a folder it must not depend on (docs/design.md §2):
#   core <- schema <- actors <- cluster <- coordinator <- examples, cli
#   core <- http <- coordinator, cli (the HTTP server: plain sockets, no CAF)
#   core, schema, http <- serving <- cli (an exported model served: no CAF)
#   core <- workloads (the reference workloads: examples, cli and bench may use them)
# when core/ includes CAF, Cap'n Proto, kj or a generated *.capnp.h header; and when examples/
# include anything but public library headers — core/, workloads/ and coordinator/ headers not
# in an internal/ folder — and third-party ones (absl/, nlohmann/, ...): an example is what a user
# copies, so it must not reach into actors/, schema/, cluster/, CAF or any folder's internals.
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
check_allowed examples core workloads coordinator
if [ -d examples ]; then
  internal='#include[[:space:]]*[<"]([^">]*/)?internal/'
  bad=$(grep -rnE "$internal|#include[[:space:]]*<(caf|capnp|kj)/|\.capnp\.h" examples)
  what="examples/ must include only public library headers (no internal/, CAF or Cap'n Proto)"
  [ -n "$bad" ] && report "$what" "$bad"
fi

# Transitively too: what an example reaches through every include (scripts/include_reach.py) holds
# no internal/ header and nothing of Cap'n Proto. (It still reaches CAF, through
# coordinator/training/training_flags.h: the public tree that ends that is docs/design.md §6.)
if [ -d examples ]; then
  for example in examples/*.cc; do
    bad=$(python3 scripts/include_reach.py --list "$example" |
          awk '($1 == "project" && $2 ~ /(^|\/)internal\//) || $1 == "capnp" { print "  " $2 }')
    [ -n "$bad" ] && report "$example reaches internal or Cap'n Proto headers through its includes" "$bad"
  done
fi

[ $status -eq 0 ] && echo "layering: ok (core <- schema <- actors <- cluster <- coordinator <-" \
  "examples, cli; core, schema, http <- serving <- cli; core <- workloads; examples use public" \
  "headers only, transitively)"
exit $status
