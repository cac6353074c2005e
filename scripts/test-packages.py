#!/usr/bin/env python3
"""Runs the workspace's test binaries package by package, as `cargo test --workspace` would
(each binary from its package's folder, stopping at the first failure), built once by
`cargo test --workspace --no-run` so every package keeps the workspace's feature set.

Between packages it runs the command given as its arguments (make test restarts the
DynamoDB Local it started: an instance that has served the whole suite answers the last
packages' tests up to ten times slower, 342 s against 18 s for one of them).

    cargo test --workspace --locked --no-run --message-format=json \\
        | scripts/test-packages.py [between-command ...]
"""
import json
import os
import subprocess
import sys
import time

packages = {}  # name -> (folder, [executables])
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") != "compiler-artifact" or not m.get("profile", {}).get("test"):
        continue
    exe = m.get("executable")
    if not exe:
        continue
    name = m["package_id"]
    folder = os.path.dirname(m["manifest_path"])
    packages.setdefault(folder, (os.path.basename(folder), []))[1].append(exe)

if not packages:
    sys.exit("test-packages: no test binaries in cargo's output")

between = sys.argv[1:]
first = True
for folder in sorted(packages):
    label, exes = packages[folder]
    if between and not first:
        subprocess.run(between, check=True)
    first = False
    start = time.monotonic()
    for exe in sorted(set(exes)):
        print(f"     Running {os.path.relpath(exe)} ({label})", flush=True)
        env = dict(os.environ, CARGO_MANIFEST_DIR=folder)
        r = subprocess.run([exe], cwd=folder, env=env)
        if r.returncode != 0:
            sys.exit(f"test-packages: {os.path.relpath(exe)} failed ({label})")
    print(f"test-packages: {label}: {time.monotonic() - start:.0f} s", flush=True)
