"""The Python side of `cargo bench --bench codec`: the same work with the
reference `google.protobuf.json_format`, on the very same Any bytes.

Run by bench/codec.rs (once per round), which writes its fixtures (one
`type_url hex` line per Any) and its own renderings to --dir. Prints one JSON
object on stdout: the samples (seconds per call) of each case, the runtime
and, with --check, whether our renderings and json_format's agree byte for
byte.

Cases:
  parse         json_format.Parse of the request body into DiscoveryRequest
                (ignore_unknown_fields=True)
  json_loads    json.loads of the same body alone (the C part of `parse`)
  listeners     render every Listener Any
  clusters      render every Cluster Any
  rerender_all  render the snapshot with one Cluster changed, all of it, and
                join the DiscoveryResponse body

"Render" is json.dumps(MessageToDict(any), sort_keys=True, separators=(",",
":"), ensure_ascii=False): what MessageToJson(any, indent=None,
sort_keys=True) does, with the compact separators and raw UTF-8 the gateway
emits, so both sides produce the same bytes.
"""

import argparse
import json
import math
import platform
import sys
import time

from google.protobuf import any_pb2, json_format
from google.protobuf import __version__ as protobuf_version
from google.protobuf.internal import api_implementation

# Every type the fixtures nest must be in the default pool for Any to resolve.
from envoy.config.cluster.v3 import cluster_pb2  # noqa: F401
from envoy.config.listener.v3 import listener_pb2  # noqa: F401
from envoy.extensions.filters.http.local_ratelimit.v3 import local_rate_limit_pb2  # noqa: F401
from envoy.extensions.filters.http.router.v3 import router_pb2  # noqa: F401
from envoy.extensions.filters.network.http_connection_manager.v3 import (  # noqa: F401
    http_connection_manager_pb2,
)
from envoy.extensions.transport_sockets.tls.v3 import tls_pb2  # noqa: F401
from envoy.service.discovery.v3 import discovery_pb2

CLUSTER_URL = "type.googleapis.com/envoy.config.cluster.v3.Cluster"


def measure(runs, min_sample, fn):
    """Samples of `fn` in seconds per call: one call sizes the samples, one
    warm-up sample is dropped, then `runs` samples lasting >= `min_sample`."""
    start = time.perf_counter()
    fn()
    once = max(time.perf_counter() - start, 1e-9)
    iters = max(1, math.ceil(min_sample / once))

    def sample():
        start = time.perf_counter()
        for _ in range(iters):
            fn()
        return (time.perf_counter() - start) / iters

    sample()
    return [sample() for _ in range(runs)]


def read_anys(path):
    anys = []
    with open(path) as f:
        for line in f:
            type_url, value = line.split()
            anys.append(any_pb2.Any(type_url=type_url, value=bytes.fromhex(value)))
    return anys


def render(any_msg):
    return json.dumps(
        json_format.MessageToDict(any_msg),
        sort_keys=True,
        separators=(",", ":"),
        ensure_ascii=False,
    )


def response_body(anys):
    parts = [render(a) for a in anys]
    return (
        '{"nonce":"n","resources":['
        + ",".join(parts)
        + '],"typeUrl":"'
        + CLUSTER_URL
        + '","versionInfo":"v"}'
    )


def compare(ours_path, theirs):
    with open(ours_path, encoding="utf-8") as f:
        ours = f.read()
    if ours == theirs:
        return "identical bytes"
    if json.loads(ours) == json.loads(theirs):
        return "same JSON value, different bytes"
    return "DIFFERENT: ours %s... python %s..." % (ours[:300], theirs[:300])


def compare_response(ours_path, anys):
    """The gateway's body against the resources rendered here: its
    resources array byte for byte, in name order as the gateway serves a
    state (its version and nonce are its own)."""
    with open(ours_path, encoding="utf-8") as f:
        ours = f.read()
    parts = [p for _, p in sorted((json.loads(r)["name"], r) for r in map(render, anys))]
    if '"resources":[' + ",".join(parts) + "]" in ours and json.loads(ours)["typeUrl"] == CLUSTER_URL:
        return "identical bytes"
    if json.loads(ours)["resources"] == [json.loads(p) for p in parts]:
        return "same JSON value, different bytes"
    return "DIFFERENT: ours %s..." % ours[:300]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dir", required=True)
    ap.add_argument("--request")
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--min-sample", type=float, default=0.2)
    ap.add_argument("--changed", type=int, required=True)
    ap.add_argument("--check", action="store_true")
    args = ap.parse_args()

    listeners = read_anys(args.dir + "/listeners.hex")
    clusters = read_anys(args.dir + "/clusters.hex")
    (changed,) = read_anys(args.dir + "/changed.hex")
    v2 = list(clusters)
    v2[args.changed] = changed

    agreement = None
    if args.check:
        agreement = {
            "listener": compare(args.dir + "/rust-listener-0.json", render(listeners[0])),
            "cluster": compare(args.dir + "/rust-cluster-0.json", render(clusters[0])),
            "response": compare_response(args.dir + "/rust-response-v2.json", v2),
        }

    samples = {}

    def run(name, fn):
        samples[name] = measure(args.runs, args.min_sample, fn)

    if args.request:
        with open(args.request, "rb") as f:
            body = f.read()

        def parse():
            msg = discovery_pb2.DiscoveryRequest()
            json_format.Parse(body, msg, ignore_unknown_fields=True)
            return msg

        assert parse().node.id
        run("parse", parse)
        run("json_loads", lambda: json.loads(body))
    run("listeners", lambda: [render(a) for a in listeners])
    run("clusters", lambda: [render(a) for a in clusters])
    run("rerender_all", lambda: response_body(v2))

    json.dump(
        {
            "samples": samples,
            "agreement": agreement,
            "runtime": "CPython %s, protobuf %s (%s backend)"
            % (platform.python_version(), protobuf_version, api_implementation.Type()),
        },
        sys.stdout,
    )


if __name__ == "__main__":
    main()
