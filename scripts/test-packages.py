#!/usr/bin/env python3
"""Runs the workspace's test binaries package by package, as `cargo test --workspace` would
(each binary from its package's folder, stopping at the first failure), built once by
`cargo test --workspace --no-run` so every package keeps the workspace's feature set.

Between packages it runs the command given as its arguments (make test restarts the
DynamoDB Local it started: an instance that has served the whole suite answers the last
packages' tests up to ten times slower, 342 s against 18 s for one of them).

`--beside LABEL[,LABEL...]:NAME=VALUE` runs those packages, one after the other, at the same
time as the rest, with the environment variable NAME set to VALUE, and the between-command
run between them with it too (make test: the devstack's end-to-end tests and the API's,
which mostly wait on batching windows, the browser and DynamoDB Local, against a DynamoDB
Local of their own, `TIDEMARK_DYNAMODB_PORT`). Their output is printed once they are done,
so neither log is cut into the other.

    cargo test --workspace --locked --no-run --message-format=json \\
        | scripts/test-packages.py [--beside LABEL,...:NAME=VALUE] [between-command ...]
"""
import json
import os
import subprocess
import sys
import tempfile
import threading
import time

args = sys.argv[1:]
beside = None  # ([labels], name, value)
if args[:1] == ["--beside"]:
    if len(args) < 2 or ":" not in args[1] or "=" not in args[1]:
        sys.exit("test-packages: --beside takes LABEL:NAME=VALUE")
    labels, assignment = args[1].split(":", 1)
    name, value = assignment.split("=", 1)
    beside = (labels.split(","), name, value)
    args = args[2:]
between = args

packages = {}  # folder -> (label, [executables])
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
    folder = os.path.dirname(m["manifest_path"])
    packages.setdefault(folder, (os.path.basename(folder), []))[1].append(exe)

if not packages:
    sys.exit("test-packages: no test binaries in cargo's output")


def run_package(folder, label, exes, env=None, out=None):
    """Runs one package's binaries in order; answers the failed binary, if any."""
    start = time.monotonic()
    for exe in sorted(set(exes)):
        print(f"     Running {os.path.relpath(exe)} ({label})", file=out or sys.stdout, flush=True)
        r = subprocess.run(
            [exe],
            cwd=folder,
            env=dict(env or os.environ, CARGO_MANIFEST_DIR=folder),
            stdout=out,
            stderr=subprocess.STDOUT if out else None,
        )
        if r.returncode != 0:
            return exe
    print(f"test-packages: {label}: {time.monotonic() - start:.0f} s", file=out or sys.stdout, flush=True)
    return None


beside_result = {}
beside_thread = None
if beside is not None:
    labels, name, value = beside
    lane = []  # (folder, label, exes)
    for label in labels:
        folder = next((f for f, (l, _) in packages.items() if l == label), None)
        if folder is None:
            sys.exit(f"test-packages: --beside {label}: no such package among the test binaries")
        lane.append((folder, label, packages.pop(folder)[1]))
    log = tempfile.TemporaryFile(mode="w+")
    lane_env = dict(os.environ, **{name: value})

    def beside_lane():
        for i, (folder, label, exes) in enumerate(lane):
            if between and i > 0:
                r = subprocess.run(between, env=lane_env, stdout=log, stderr=subprocess.STDOUT)
                if r.returncode != 0:
                    beside_result["failed"] = f"the between-command before {label}"
                    return
            failed = run_package(folder, label, exes, env=lane_env, out=log)
            if failed:
                beside_result["failed"] = failed
                beside_result["label"] = label
                return

    print(f"test-packages: {', '.join(labels)} run beside the others ({name}={value}); their output follows", flush=True)
    beside_thread = threading.Thread(target=beside_lane)
    beside_thread.start()


def finish_beside():
    if beside_thread is None:
        return None
    beside_thread.join()
    log.seek(0)
    print(f"---- {', '.join(beside[0])} (ran beside) ----", flush=True)
    sys.stdout.write(log.read())
    sys.stdout.flush()
    return beside_result.get("failed")


first = True
for folder in sorted(packages):
    label, exes = packages[folder]
    if between and not first:
        subprocess.run(between, check=True)
    first = False
    failed = run_package(folder, label, exes)
    if failed:
        finish_beside()
        sys.exit(f"test-packages: {os.path.relpath(failed)} failed ({label})")

failed = finish_beside()
if failed:
    sys.exit(f"test-packages: {os.path.relpath(failed)} failed ({beside_result.get('label', 'beside')})")
