#!/usr/bin/env python3
"""Run the workspace's test binaries in lanes, as `cargo test --no-fail-fast` would one by one.

Reads cargo's JSON messages (`cargo test --no-run --message-format=json`) on stdin, takes every
test executable from them, and runs them LANES at a time, the longest expected first (so the
lanes end together: a binary's expected seconds come from a CI run, below). Each binary runs in
its package's directory, as cargo runs it, with the arguments given after `--`; its output is
printed whole when it ends, under cargo's "Running" line, so that the `test result:` lines the
summary counts are as cargo prints them. Exits non-zero if any binary failed.

Why: cargo runs test binaries one after another, and most of their time is spent waiting on
syncs, mounts and child processes; CI's test phase was the sum of them (the CLI suite alone
303 s of 700 s).
"""
import json
import os
import subprocess
import sys
import threading

# Seconds each binary took in a CI run, one at a time (package/target): the order they start in.
EXPECTED = {
    "tarn-cli/suite": 303,
    "tarn-engine/crash": 107,
    "tarn-engine/tarn": 67,
    "tarn-engine/fs": 59,
    "tarn-stress/stress_fixed_seeds": 57,
    "tarn-engine/pool": 56,
    "tarn-engine/datasets": 23,
    "tarn-protocol/tarn_protocol": 11,
}


def executables(messages):
    found = []
    for line in messages:
        line = line.strip()
        if not line.startswith("{"):
            continue
        message = json.loads(line)
        if message.get("reason") != "compiler-artifact" or not message.get("executable"):
            continue
        if not message.get("profile", {}).get("test"):
            continue
        package = os.path.dirname(message["manifest_path"])
        # The package's name (not its directory), as the keys of EXPECTED have it.
        # package_id is "path+file:///DIR#NAME@VERSION", or "...DIR#VERSION" when NAME is DIR's.
        url, _, fragment = message["package_id"].partition("#")
        name = fragment.split("@")[0] if "@" in fragment else url.rstrip("/").rsplit("/", 1)[-1]
        key = f"{name}/{message['target']['name']}"
        src = message["target"]["src_path"]
        found.append((EXPECTED.get(key, 5), key, message["executable"], package, src))
    found.sort(key=lambda entry: -entry[0])
    return found


def main():
    args = sys.argv[1:]
    lanes = 2
    if args[:1] == ["--lanes"]:
        lanes = int(args[1])
        args = args[2:]
    if args[:1] == ["--"]:
        args = args[1:]
    queue = executables(sys.stdin)
    if not queue:
        print("run-tests: no test executables in cargo's messages", file=sys.stderr)
        return 1
    lock = threading.Lock()
    failures = []

    def lane():
        while True:
            with lock:
                if not queue:
                    return
                _, key, executable, package, src = queue.pop(0)
            relative = os.path.relpath(src, package)
            result = subprocess.run(
                [executable, *args],
                cwd=package,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
            )
            with lock:
                print(f"     Running {relative} ({os.path.relpath(executable)})", flush=True)
                sys.stdout.buffer.write(result.stdout)
                sys.stdout.flush()
                if result.returncode != 0:
                    failures.append(f"{key} (exit {result.returncode})")

    threads = [threading.Thread(target=lane) for _ in range(lanes)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    if failures:
        print("error: test binaries failed: " + ", ".join(failures), flush=True)
        return 101
    return 0


if __name__ == "__main__":
    sys.exit(main())
