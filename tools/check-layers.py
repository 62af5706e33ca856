#!/usr/bin/env python3
"""Check that the calls and includes between src/'s folders go one way.

Usage: python3 tools/check-layers.py   (after `make`, from the top of the tree)

The calls are read from the built objects with nm: a file calls another when
it uses a symbol the other defines.  The rules are those the folders'
interface headers state (pg_tsmove.h has the map):

    pg_tsmove.c   may call every folder; nothing calls it
    api/          -> engine/, jobs/
    workers/      -> relation/, relocation/, engine/, jobs/
    relation/     -> engine/, jobs/
    relocation/   -> engine/, jobs/
    engine/       -> jobs/
    jobs/         -> nothing outside itself
    monitor/      -> autopilot/ (the sampler starts the pilot)
    autopilot/    -> nothing outside itself

and, inside that: only workers/worker.c calls the copy, the mirror and
the reconciliation (engine/copy.c, engine/mirror.c, engine/reconcile.c); no cycle between files; a folder's
*_internal.h is included only by its own files; a file includes headers of
its own folder and of the folders it may call, and pg_tsmove.h, compat.h.
Prints every breach and exits 1 if there is one.
"""
import collections
import glob
import os
import re
import subprocess
import sys

MAY_CALL = {
    'pg_tsmove': {'api', 'workers', 'relation', 'relocation', 'engine', 'jobs',
                  'monitor', 'autopilot'},
    'api': {'engine', 'jobs'},
    'workers': {'relation', 'relocation', 'engine', 'jobs'},
    'relation': {'engine', 'jobs'},
    'relocation': {'engine', 'jobs'},
    'engine': {'jobs'},
    'jobs': set(),
    'monitor': {'autopilot'},
    'autopilot': set(),
    'compat': set(),          # compat.h, included everywhere
}
ONLY_THE_WORKER = {'engine/copy', 'engine/mirror', 'engine/reconcile'}
EVERYWHERE = {'pg_tsmove.h', 'compat.h'}


def folder(unit):
    return unit.split('/')[0] if '/' in unit else unit


def main():
    os.chdir(os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
    objs = sorted(glob.glob('src/**/*.o', recursive=True))
    sources = sorted(glob.glob('src/**/*.[ch]', recursive=True))
    if not objs:
        sys.exit('check-layers: no objects under src/: run make first')
    breaches = []
    for unit in {s[4:-2] for s in sources}:
        if folder(unit) not in MAY_CALL:
            breaches.append(f'{unit}: folder {folder(unit)}/ has no rule here')

    defined, used = {}, collections.defaultdict(set)
    for obj in objs:
        unit = obj[4:-2]
        out = subprocess.run(['nm', obj], capture_output=True, text=True,
                             check=True).stdout
        for line in out.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] in 'TDBR':
                defined[parts[2]] = unit
            elif len(parts) == 2 and parts[0] == 'U':
                used[unit].add(parts[1])
    calls = collections.defaultdict(dict)
    for unit, symbols in used.items():
        for sym in symbols:
            callee = defined.get(sym)
            if callee and callee != unit:
                calls[unit].setdefault(callee, sym)

    for caller, callees in sorted(calls.items()):
        for callee, sym in sorted(callees.items()):
            a, b = folder(caller), folder(callee)
            if a != b and b not in MAY_CALL.get(a, set()):
                breaches.append(f'{caller} calls {callee} ({sym}): '
                                f'{a}/ may not call {b}/')
            if callee in ONLY_THE_WORKER and caller != 'workers/worker':
                breaches.append(f'{caller} calls {callee} ({sym}): only '
                                'workers/worker.c calls the copy and the mirror')

    # a cycle between files, by depth-first search
    state = {}

    def visit(unit, path):
        state[unit] = 'open'
        for callee in sorted(calls.get(unit, {})):
            if state.get(callee) == 'open':
                cycle = path[path.index(callee):] + [callee]
                breaches.append('cycle: ' + ' -> '.join(cycle))
            elif callee not in state:
                visit(callee, path + [callee])
        state[unit] = 'done'
    for unit in sorted(calls):
        if unit not in state:
            visit(unit, [unit])

    include = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)
    for src in sources:
        unit = src[4:-2]
        here = folder(unit)
        with open(src) as f:
            text = f.read()
        for header in include.findall(text):
            if header in EVERYWHERE or '/' not in header:
                continue
            there = header.split('/')[0]
            if there not in MAY_CALL:
                continue        # a PostgreSQL header
            if header.endswith('_internal.h') and there != here:
                breaches.append(f'{src} includes {header}, '
                                f'private to {there}/')
            elif there != here and there not in MAY_CALL.get(here, set()):
                breaches.append(f'{src} includes {header}: '
                                f'{here}/ may not call {there}/')

    for b in breaches:
        print('check-layers:', b)
    nfiles = len({o[4:-2] for o in objs})
    nedges = sum(len(c) for c in calls.values())
    print(f'check-layers: {nfiles} files, {nedges} calls between them, '
          f'{len(breaches)} breaches')
    sys.exit(1 if breaches else 0)


if __name__ == '__main__':
    main()
