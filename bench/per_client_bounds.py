#!/usr/bin/env python3
"""Issue 20, finding 4: the gateway's resident memory while one client asks
for a new random 19,000-name subset of a 40,000-name pool on every poll.

Starts the gateway binary given (a release build) on 127.0.0.1 with the
embedded demo snapshot, POSTs `--requests` bodies for one node (or, with
`--new-metadata`, a new `node.metadata` each time, so a new session each
time), and prints its VmRSS every `--every` requests. Bounded: at most
`--requests` requests, each with a 30 s timeout, and `--max-seconds` in all.

    python3 bench/per_client_bounds.py /work/target-bounds/release/xds-gateway
"""

import argparse
import json
import random
import socket
import subprocess
import sys
import time
import urllib.request

POOL = [f"cluster-{i:05d}" for i in range(40_000)]


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def rss_mib(pid):
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def post(port, body):
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/v3/discovery:clusters",
        data=json.dumps(body).encode(),
        headers={"content-type": "application/json"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status
    except urllib.error.HTTPError as e:
        return e.code


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("binary")
    parser.add_argument("--requests", type=int, default=120)
    parser.add_argument("--names", type=int, default=19_000)
    parser.add_argument("--every", type=int, default=20)
    parser.add_argument("--new-metadata", action="store_true")
    parser.add_argument("--max-seconds", type=float, default=600)
    args = parser.parse_args()
    rest, admin = free_port(), free_port()
    gateway = subprocess.Popen(
        [args.binary, "--listen", f"127.0.0.1:{rest}", "--admin", f"127.0.0.1:{admin}"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + args.max_seconds
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{admin}/healthz", timeout=1)
                break
            except OSError:
                if time.monotonic() > deadline or gateway.poll() is not None:
                    sys.exit("the gateway did not start")
                time.sleep(0.1)
        rng = random.Random(20)
        print(f"requests  rss_mib  (statuses so far)", flush=True)
        print(f"{0:8d}  {rss_mib(gateway.pid):7.1f}", flush=True)
        statuses = {}
        for i in range(1, args.requests + 1):
            node = {"id": "edge-1"}
            if args.new_metadata:
                node["metadata"] = {"attempt": i}
            body = {"node": node, "resource_names": rng.sample(POOL, args.names)}
            status = post(rest, body)
            statuses[status] = statuses.get(status, 0) + 1
            if i % args.every == 0:
                print(f"{i:8d}  {rss_mib(gateway.pid):7.1f}  {statuses}", flush=True)
            if time.monotonic() > deadline:
                print(f"stopped after {i} requests: --max-seconds", flush=True)
                break
    finally:
        gateway.terminate()
        gateway.wait(timeout=30)


if __name__ == "__main__":
    main()
