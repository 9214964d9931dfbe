#!/usr/bin/env python3
"""Prints what a source file reaches through its includes, transitively.

    scripts/include_reach.py coordinator/training/training_job.h
    scripts/include_reach.py --list examples/recsys.cc

Counts the project headers reached (those that exist in this repository, by their
repo-root path: "tessera/x.h" is include/tessera/x.h), the CAF headers and the Cap'n Proto / kj headers (generated *.capnp.h
included); with --list, names each. It reads #include lines as text, as the layering
check does (scripts/check_layering.sh), so a header behind an #if is counted too.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^">]+)[">]', re.M)


def reach(root, starts):
    seen, caf, capnp, stack = set(), set(), set(), list(starts)
    while stack:
        header = stack.pop()
        if header in seen:
            continue
        seen.add(header)
        with open(os.path.join(root, header), encoding='utf-8') as f:
            text = f.read()
        for name in INCLUDE.findall(text):
            if name.startswith('caf/'):
                caf.add(name)
            elif name.startswith(('capnp/', 'kj/')) or name.endswith('.capnp.h'):
                capnp.add(name)
            elif os.path.isfile(os.path.join(root, name)):
                stack.append(name)
            elif os.path.isfile(os.path.join(root, 'include', name)):  # the public tree
                stack.append('include/' + name)
    return sorted(seen - set(starts)), sorted(caf), sorted(capnp)


def main(argv):
    show = '--list' in argv
    files = [a for a in argv if a != '--list']
    if not files:
        print(__doc__.strip(), file=sys.stderr)
        return 2
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    for f in files:
        if not os.path.isfile(os.path.join(root, f)):
            print(f'include_reach: no file {f} in {root}', file=sys.stderr)
            return 2
    project, caf, capnp = reach(root, files)
    print(f'{" ".join(files)}: {len(project)} project headers, {len(caf)} CAF headers, '
          f'{len(capnp)} Cap\'n Proto headers')
    if show:
        for kind, names in (('project', project), ('caf', caf), ('capnp', capnp)):
            for name in names:
                print(f'  {kind:8} {name}')
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv[1:]))
