"""A reference SotW ADS control plane for tests/gateway_ads.rs.

Independent of the gateway's code: grpcio + xds-protos only.

Usage: python ads_server.py [PORT] [--strict-nonce]

Serves envoy.service.discovery.v3.AggregatedDiscoveryService /
StreamAggregatedResources (state of the world) on 127.0.0.1:PORT (0 or no
argument: a free port) and a small JSON control interface over HTTP on
another free loopback port. The first two lines on stdout are

    PORT <ads port>
    CONTROL <control port>

SotW semantics, per stream and per type:
- the subscription is the request's resource_names; an empty list, or one
  holding "*", is a wildcard (all resources of the type);
- a response is sent when a type is first requested on the stream (as soon as
  a snapshot of the type exists), when the snapshot version of a subscribed
  type changes, and when the subscription changes;
- every response carries a fresh nonce (increasing, unique across streams);
- a request whose response_nonce is the latest nonce sent for its type is an
  ACK (no error_detail) or a NACK (error_detail set); both are recorded. A
  request with a stale nonce is not an ACK/NACK, but a subscription change in
  it still counts. With --strict-nonce a request with a stale (or empty)
  nonce for a type that already got a response is ignored entirely, as
  go-control-plane's SotW server does (pkg/server/sotw/v3/ads.go: "If these
  requirements aren't satisfied, leave an open watch"), so a client must
  repeat its subscription in its next ACK;
- a named subscription gets only the named resources that exist.

Control interface (JSON):
- POST /set      {"type_url", "version", "resources": [<JSON Any with "@type">...]}
  replaces that type's snapshot and pushes it to open streams; answers
  {"resources": [<canonical JSON of each resource>...]} (protobuf's own
  json_format rendering, for comparisons);
- POST /set_raw  {"type_url", "version", "resources": [{"type_url", "value_b64",
  "name"?}...]} the same with raw Any payloads (undecodable bytes, unknown types);
- GET /stats     {"streams_total", "streams_open", "requests": [...], "acks", "nacks"}.

Exits on SIGTERM, SIGINT or when stdin closes.
"""

import base64
import importlib
import itertools
import json
import os
import pkgutil
import queue
import signal
import sys
import threading
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import any_pb2, json_format

PACKAGES = ("envoy", "xds", "udpa", "validate")


def import_all_protos():
    """Registers every xds-protos message type in the default pool."""
    for top in PACKAGES:
        try:
            package = importlib.import_module(top)
        except ImportError:
            continue
        for info in pkgutil.walk_packages(package.__path__, top + "."):
            if info.name.endswith("_pb2"):
                try:
                    importlib.import_module(info.name)
                except Exception:  # pylint: disable=broad-except
                    pass


import_all_protos()

# pylint: disable=wrong-import-position
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2  # noqa: E402

_NONCES = itertools.count(1)
STRICT_NONCE = "--strict-nonce" in sys.argv[1:]


class ControlPlane:
    """Snapshots, open streams and what the streams sent."""

    def __init__(self):
        self.lock = threading.Lock()
        # type_url -> (version, {name: Any}) in insertion order
        self.snapshots = {}
        self.streams = set()  # queues of open streams
        self.streams_total = 0
        self.requests = []
        self.acks = 0
        self.nacks = 0

    def set_snapshot(self, type_url, version, resources):
        with self.lock:
            self.snapshots[type_url] = (version, resources)
            streams = list(self.streams)
        for events in streams:
            events.put(("snapshot", type_url))

    def snapshot(self, type_url):
        with self.lock:
            return self.snapshots.get(type_url)

    def open_stream(self, events):
        with self.lock:
            self.streams.add(events)
            self.streams_total += 1

    def close_stream(self, events):
        with self.lock:
            self.streams.discard(events)

    def record(self, request, kind):
        error = None
        if request.HasField("error_detail"):
            error = {
                "code": request.error_detail.code,
                "message": request.error_detail.message,
            }
        with self.lock:
            self.requests.append(
                {
                    "type_url": request.type_url,
                    "version_info": request.version_info,
                    "response_nonce": request.response_nonce,
                    "resource_names": list(request.resource_names),
                    "error_detail": error,
                    "has_node": request.HasField("node"),
                    "node_id": request.node.id if request.HasField("node") else None,
                    "kind": kind,
                }
            )
            if kind == "ack":
                self.acks += 1
            elif kind == "nack":
                self.nacks += 1

    def stats(self):
        with self.lock:
            return {
                "streams_total": self.streams_total,
                "streams_open": len(self.streams),
                "requests": list(self.requests),
                "acks": self.acks,
                "nacks": self.nacks,
            }


PLANE = ControlPlane()


class TypeWatch:
    """One type on one stream."""

    def __init__(self, names):
        self.names = names  # None = wildcard, else a frozenset
        self.sent_version = None  # snapshot version last sent; None = nothing yet
        self.sent_names = None  # subscription the last response answered
        self.nonce = None  # nonce of the last response


def subscription(resource_names):
    names = frozenset(resource_names)
    if not names or "*" in names:
        return None
    return names


class Servicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def StreamAggregatedResources(self, request_iterator, context):
        events = queue.Queue()

        def read():
            try:
                for request in request_iterator:
                    events.put(("request", request))
            except Exception:  # pylint: disable=broad-except
                pass
            events.put(("end", None))

        context.add_callback(lambda: events.put(("end", None)))
        PLANE.open_stream(events)
        threading.Thread(target=read, daemon=True).start()
        watches = {}
        try:
            while True:
                try:
                    event, payload = events.get(timeout=0.5)
                except queue.Empty:
                    if not context.is_active():
                        return
                    continue
                if event == "end":
                    return
                if event == "request":
                    response = self.on_request(watches, payload)
                else:
                    response = self.on_snapshot(watches, payload)
                if response is not None:
                    yield response
        finally:
            PLANE.close_stream(events)

    @staticmethod
    def on_request(watches, request):
        type_url = request.type_url
        names = subscription(request.resource_names)
        watch = watches.get(type_url)
        if watch is None:
            # First request of this type on this stream: whatever its nonce.
            PLANE.record(request, "subscribe")
            watch = TypeWatch(names)
            watches[type_url] = watch
            return respond(type_url, watch)
        kind = "stale"
        if STRICT_NONCE and watch.nonce is not None and request.response_nonce != watch.nonce:
            PLANE.record(request, kind)
            return None
        if request.response_nonce and request.response_nonce == watch.nonce:
            if request.HasField("error_detail"):
                kind = "nack"
            elif request.version_info == watch.sent_version:
                kind = "ack"
            else:
                kind = "request"
        elif not request.response_nonce:
            kind = "request"
        PLANE.record(request, kind)
        if names != watch.names:
            watch.names = names
            return respond(type_url, watch)
        return None

    @staticmethod
    def on_snapshot(watches, type_url):
        watch = watches.get(type_url)
        if watch is None:
            return None
        snapshot = PLANE.snapshot(type_url)
        if snapshot is None or snapshot[0] == watch.sent_version:
            return None
        return respond(type_url, watch)


def respond(type_url, watch):
    """The response for `watch` now, or None while there is no snapshot."""
    snapshot = PLANE.snapshot(type_url)
    if snapshot is None:
        return None
    version, resources = snapshot
    if watch.names is None:
        chosen = list(resources.values())
    else:
        chosen = [resources[n] for n in sorted(watch.names) if n in resources]
    nonce = str(next(_NONCES))
    watch.sent_version = version
    watch.sent_names = watch.names
    watch.nonce = nonce
    return discovery_pb2.DiscoveryResponse(
        version_info=version,
        resources=chosen,
        type_url=type_url,
        nonce=nonce,
    )


def resource_name(value, index):
    if isinstance(value, dict):
        for key in ("name", "cluster_name", "clusterName"):
            if isinstance(value.get(key), str):
                return value[key]
    return f"resource-{index}"


class Control(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep stderr quiet
        pass

    def reply(self, status, body):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/stats":
            self.reply(200, PLANE.stats())
        else:
            self.reply(404, {"error": f"no {self.path}"})

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            type_url = body["type_url"]
            version = body["version"]
            resources = {}
            canonical = []
            if self.path == "/set":
                for i, item in enumerate(body.get("resources", [])):
                    text = item if isinstance(item, str) else json.dumps(item)
                    any_msg = json_format.Parse(text, any_pb2.Any())
                    resources[resource_name(json.loads(text), i)] = any_msg
                    canonical.append(json_format.MessageToDict(any_msg))
            elif self.path == "/set_raw":
                for i, item in enumerate(body.get("resources", [])):
                    any_msg = any_pb2.Any(
                        type_url=item["type_url"],
                        value=base64.b64decode(item.get("value_b64", "")),
                    )
                    resources[item.get("name") or f"raw-{i}"] = any_msg
            else:
                self.reply(404, {"error": f"no {self.path}"})
                return
        except Exception as err:  # pylint: disable=broad-except
            self.reply(400, {"error": f"{type(err).__name__}: {err}"})
            return
        PLANE.set_snapshot(type_url, version, resources)
        self.reply(200, {"resources": canonical})


def main():
    args = [a for a in sys.argv[1:] if not a.startswith("--")]
    port = int(args[0]) if args else 0
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=64))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(Servicer(), server)
    ads_port = server.add_insecure_port(f"127.0.0.1:{port}")
    if ads_port == 0:
        sys.stderr.write(f"cannot bind 127.0.0.1:{port}\n")
        sys.exit(1)
    server.start()
    control = ThreadingHTTPServer(("127.0.0.1", 0), Control)
    control.daemon_threads = True
    threading.Thread(target=control.serve_forever, daemon=True).start()
    sys.stdout.write(f"PORT {ads_port}\nCONTROL {control.server_address[1]}\n")
    sys.stdout.flush()

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())

    def watch_stdin():
        try:
            while sys.stdin.read(4096):
                pass
        except Exception:  # pylint: disable=broad-except
            pass
        stop.set()

    threading.Thread(target=watch_stdin, daemon=True).start()
    while not stop.wait(0.2):
        pass
    server.stop(grace=0)
    control.shutdown()
    sys.stdout.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
