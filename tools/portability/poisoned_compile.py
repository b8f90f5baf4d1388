#!/usr/bin/env python3
"""Compiles (syntax only) every translation unit of compile_commands.json outside src/platform with the poison
header force-included; two compilers at a time. Usage: poisoned_compile.py COMPILE_COMMANDS ROOT POISON_HEADER.
Exits 1 if any file fails, naming it and its errors."""
import concurrent.futures
import json
import re
import shlex
import subprocess
import sys

commands, root, poison = sys.argv[1:4]
exempt = re.compile(r'^(src/platform/|transports/.*(/|_)(linux|darwin)[_.])')
units, seen = [], set()
for entry in json.load(open(commands)):
    path = entry['file']
    rel = path[len(root) + 1:] if path.startswith(root + '/') else None
    if rel is None or exempt.search(rel) or path in seen or not path.endswith(('.cc', '.cpp', '.c')):
        continue
    seen.add(path)
    args = entry.get('arguments') or shlex.split(entry['command'])
    out, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in ('-o', '-MF', '-MT', '-MQ'):
            skip = True
        elif arg not in ('-c', '-MD', '-MMD') and not arg.endswith('ccache'):
            out.append(arg)
    units.append((rel, entry['directory'], out[:1] + ['-fsyntax-only', '-include', poison] + out[1:]))

if len(units) < 50:
    sys.exit(f"portability: only {len(units)} translation units in {commands}")


def check(unit):
    rel, directory, argv = unit
    done = subprocess.run(argv, cwd=directory, capture_output=True, text=True)
    return rel, done.returncode, done.stderr


failed = 0
with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
    for rel, code, errors in pool.map(check, units):
        if code != 0:
            failed += 1
            lines = [line for line in errors.splitlines() if 'error' in line] or errors.splitlines()
            print(f"portability: {rel}:\n  " + "\n  ".join(lines[:10]))
print(f"portability: {len(units) - failed} of {len(units)} files compile with the Linux-only names poisoned")
sys.exit(1 if failed else 0)
