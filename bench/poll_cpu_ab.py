#!/usr/bin/env python3
"""CPU per poll of two gateway binaries, A and B, in alternating rounds.

Each round starts a fresh gateway process on the demo snapshot (loopback,
free ports), warms it with 3,000 polls, then makes N polls with h2load (Envoy
1.40's 77 KB node, an EDS request for the demo's `gateway_rest`) and reads the
process's user and system CPU from /proc. The order of A and B flips each
round. Prints the median CPU per poll of each, the rounds, and B/A, then
the polls a second h2load saw (h2load itself takes most of one of this
machine's two cores, so that is a comparison, not a capacity).

    python3 bench/poll_cpu_ab.py A_BINARY B_BINARY h1|h2|h2-one|h1-tls|h2-tls [ROUNDS] [POLLS]

h1 is `h2load --h1 -c16 -m1` (keep-alive, one poll at a time per connection),
h2 is `h2load -c4 -m32` (many streams per connection, as an Envoy polls),
h2-one is `h2load -c1 -m32` (one Envoy's one connection); the
`-tls` ones are the same over TLS (`--tls-cert`, a self-signed P-256
certificate made with `openssl` for the run). Needs h2load (`apt-get install
nghttp2-client`) and openssl.
"""

import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tempfile
import time

FIXTURE = os.path.join(os.path.dirname(__file__), "fixtures", "envoy-1.40-cds-request.json")
EDS = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LOADS = {"h1": ["--h1", "-c16", "-m1"], "h2": ["-c4", "-m32"], "h2-one": ["-c1", "-m32"]}
PROTOCOLS = ("h1", "h2", "h2-one", "h1-tls", "h2-tls")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def wait_listening(port, within=10.0):
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
            return
        except OSError:
            time.sleep(0.05)
    raise SystemExit(f"the gateway did not listen on {port} within {within} s")


def self_signed(directory):
    """A certificate and key for 127.0.0.1, as the gateway's TLS flags."""
    cert, key = os.path.join(directory, "cert.pem"), os.path.join(directory, "key.pem")
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256",
         "-nodes", "-days", "1", "-subj", "/CN=127.0.0.1", "-addext",
         "subjectAltName=IP:127.0.0.1", "-keyout", key, "-out", cert],
        capture_output=True, check=True,
    )
    return ["--tls-cert", cert, "--tls-key", key]


def one_round(binary, body, protocol, polls, tls):
    rest, admin = free_port(), free_port()
    gateway = subprocess.Popen(
        [binary, "--listen", f"127.0.0.1:{rest}", "--admin", f"127.0.0.1:{admin}", *tls],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        wait_listening(rest)
        scheme = "https" if tls else "http"
        url = f"{scheme}://127.0.0.1:{rest}/v3/discovery:endpoints"
        load = LOADS[protocol.removesuffix("-tls")]
        h2load = ["h2load", "-d", body, "-H", "content-type: application/json", *load]
        subprocess.run([*h2load, "-n", "3000", url], capture_output=True, check=True)
        user0, system0 = cpu_seconds(gateway.pid)
        out = subprocess.run(
            [*h2load, "-n", str(polls), url], capture_output=True, text=True, check=True
        ).stdout
        user1, system1 = cpu_seconds(gateway.pid)
        if f"{polls} 2xx" not in out:
            raise SystemExit(f"not every poll was a 200:\n{out}")
        rate = float(re.search(r"finished in [^,]+, ([0-9.]+) req/s", out).group(1))
        return (user1 - user0) / polls * 1e6, (system1 - system0) / polls * 1e6, rate
    finally:
        gateway.terminate()
        gateway.wait(timeout=10)


def main():
    if len(sys.argv) < 4 or sys.argv[3] not in PROTOCOLS:
        raise SystemExit(__doc__)
    binaries = {"A": sys.argv[1], "B": sys.argv[2]}
    protocol = sys.argv[3]
    rounds = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    polls = int(sys.argv[5]) if len(sys.argv) > 5 else 30000
    request = json.load(open(FIXTURE))
    request.update(type_url=EDS, resource_names=["gateway_rest"], version_info="")
    with tempfile.TemporaryDirectory() as directory:
        body = os.path.join(directory, "poll.json")
        with open(body, "w") as out:
            json.dump(request, out)
        tls = self_signed(directory) if protocol.endswith("-tls") else []
        results = {name: [] for name in binaries}
        for r in range(rounds):
            order = list(binaries.items())
            for name, binary in order if r % 2 == 0 else reversed(order):
                results[name].append(one_round(binary, body, protocol, polls, tls))
    medians = {}
    for name, rows in results.items():
        totals = [u + s for u, s, _ in rows]
        medians[name] = statistics.median(totals)
        print(
            f"{name} {protocol}: {medians[name]:.1f} µs/poll "
            f"(rounds {' '.join(f'{t:.1f}' for t in totals)}), "
            f"user {statistics.median(u for u, _, _ in rows):.1f}, "
            f"system {statistics.median(s for _, s, _ in rows):.1f}"
        )
    print(f"B/A {protocol}: {medians['B'] / medians['A']:.2f}")
    rates = {name: statistics.median(r for _, _, r in rows) for name, rows in results.items()}
    print(
        f"polls/s {protocol}: A {rates['A']:.0f}, B {rates['B']:.0f}, "
        f"B/A {rates['B'] / rates['A']:.2f}"
    )


if __name__ == "__main__":
    main()
