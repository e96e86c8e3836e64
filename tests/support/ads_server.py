"""A reference xDS control plane for tests/gateway_ads.rs and
tests/upstream_modes.rs.

Independent of the gateway's code: grpcio + xds-protos only.

Usage: python ads_server.py [PORT] [--strict-nonce] [--no-sotw] [--no-delta]
                            [--no-fetch] [--no-absent]
                            [--up-to-date-style go|rust|never] [--fetch-delay-ms N]

Serves on 127.0.0.1:PORT (0 or no argument: a free port):
- envoy.service.discovery.v3.AggregatedDiscoveryService /
  StreamAggregatedResources (state of the world, below) and
  DeltaAggregatedResources (incremental, below);
- the unary Fetch* method of the eight discovery services (Listener, Route,
  ScopedRoutes, Cluster, Endpoint, Secret, Runtime, ExtensionConfig);
- HealthDiscoveryService/FetchHealthCheck and
  ClientStatusDiscoveryService/FetchClientStatus with canned answers;
and a small JSON control interface over HTTP on another free loopback port.
The first two lines on stdout are

    PORT <ads port>
    CONTROL <control port>

SotW semantics, per stream and per type:
- the subscription is the request's resource_names; an empty list, or one
  holding "*", is a wildcard (all resources of the type);
- a response is sent when a type is first requested on the stream (as soon as
  a snapshot of the type exists), when the snapshot version of a subscribed
  type changes, and when the subscription changes;
- every response carries a fresh nonce (increasing, unique across streams);
- nonces are per stream: a request whose response_nonce this stream never
  sent (a client presenting a dead stream's nonce after a reconnect) is
  ignored entirely, as the strictest real servers do; it is recorded with
  kind "foreign". This applies to delta streams too;
- a request whose response_nonce is the latest nonce sent for its type is an
  ACK (no error_detail) or a NACK (error_detail set); both are recorded. A
  request with a stale nonce is not an ACK/NACK, but a subscription change in
  it still counts. With --strict-nonce a request with a stale (or empty)
  nonce for a type that already got a response is ignored entirely, as
  go-control-plane's SotW server does (pkg/server/sotw/v3/ads.go: "If these
  requirements aren't satisfied, leave an open watch"), so a client must
  repeat its subscription in its next ACK;
- a named subscription gets only the named resources that exist;
- a name in the xdstp form whose id is "*" or ends in "/*" is a glob
  collection (xDS TP1): it stands for every resource whose name is in the
  xdstp form with the same authority, type and context parameters (compared
  %-decoded, as a set) and whose id is an immediate child of the glob's
  directory; the response carries those resources under their own names.
  This holds for delta subscriptions too, where a glob is never signalled as
  absent.

Delta semantics, per stream and per type (DeltaAggregatedResources):
- the subscription is a set of names plus a wildcard flag: "*" in
  resource_names_subscribe turns the wildcard on, in
  resource_names_unsubscribe off; an empty subscribe list in the first
  request of a type is the legacy wildcard;
- the first request of a type seeds what the client has from its
  initial_resource_versions: those resources are not resent unless their
  version changed (and are sent as removed if they are gone); a name
  subscribed later is always (re)sent, as the xDS spec requires;
- the per-resource version is the first 16 hex digits of the SHA-256 of the
  serialised Any;
- a response carries the added/changed resources the client wants (named,
  or all under the wildcard), removed_resources for what it has that is
  gone, and, once per subscription, a Resource with only the name for a
  subscribed name that does not exist (the spec's "does not exist" signal;
  --no-absent leaves it out, as go-control-plane does);
  it is sent when that is not empty, on subscription changes and snapshot
  changes, and for the first wildcard request of a type even if empty (as
  go-control-plane does), as soon as a snapshot of the type exists;
- every request is recorded (subscribe, unsubscribe, initial versions,
  nonce, error_detail, kind = subscribe/ack/nack/stale/request/foreign).

Fetch semantics (unary Fetch*): the snapshot of the service's type (named
resources that exist, or all for no names); when the request's version_info
equals the snapshot version the answer is "up to date": gRPC UNKNOWN "skip
fetch: version up to date" with --up-to-date-style go (go-control-plane, the
default), ALREADY_EXISTS with rust (rust-control-plane); with never, every
Fetch is answered in full (a control plane that has no "up to date"
answer); without a snapshot
of the type, UNKNOWN "missing snapshot for ..." (go-control-plane). Every call is
counted per type. --fetch-delay-ms delays each answer (to make concurrent
calls overlap).

--no-sotw, --no-delta, --no-fetch make those methods answer UNIMPLEMENTED
(what a server that does not register them answers); the attempts are
counted in /stats "unimplemented".

Delta-only types (as Envoy has them): virtual hosts (VHDS,
envoy.config.route.v3.VirtualHost) and LEDS endpoints
(envoy.config.endpoint.v3.LbEndpoint) are served on delta streams only; a
SotW request for them is recorded (kind "delta-only") and never answered, and
they have no Fetch method. Their resources are named by /set's "names" (an
LbEndpoint has no name of its own). For virtual hosts, a subscribed name
also stands for its namespace (Envoy's VHDS subscribes to a route
configuration `rc` and gets every `rc/<virtual host>`: the part of a name
before its last "/"), and for an alias: /set's "aliases" maps a virtual host
to the on-demand names (`rc/<domain>`) it resolves; subscribing to an alias
(re)sends the virtual host with the subscribed aliases in its Resource's
`aliases`, and an alias that resolves to nothing is answered with a Resource
carrying only that name (what Envoy's VHDS expects). A namespace is never
signalled as absent.

Resource wrappers and TTLs: a resource named in the "wrap" map of /set is
sent wrapped in an envoy.service.discovery.v3.Resource (name, resource, and
ttl when its value is a number of milliseconds; null: no ttl) in SotW; in
delta its Resource carries that ttl. POST /heartbeat {"type_url"} sends, on
every stream that holds the type's current version, a heartbeat: SotW
repeats the response at the same version with each resource that has a ttl
as a wrapper without the resource (name and ttl only) and the others in
full; delta sends a Resource with only the name, the version the client
holds and the ttl, for each of them.

Control interface (JSON):
- POST /set      {"type_url", "version", "resources": [<JSON Any with "@type">...],
  "wrap"?: {name: ttl_ms or null}, "names"?: [name per resource],
  "aliases"?: {name: [alias...]}}
  replaces that type's snapshot and pushes it to open streams; answers
  {"resources": [<canonical JSON of each resource>...]} (protobuf's own
  json_format rendering, for comparisons);
- POST /set_raw  {"type_url", "version", "resources": [{"type_url", "value_b64",
  "name"?}...]} the same with raw Any payloads (undecodable bytes, unknown types);
- GET /stats     {"streams_total", "streams_open", "requests": [...], "acks", "nacks",
  "delta_streams_total", "delta_streams_open", "delta_requests": [...],
  "fetches": {type_url: calls}, "fetch_requests": [...], "hds_requests": [...],
  "csds_requests": [...], "unimplemented": {"sotw", "delta", "fetch"}, "config"}
  (streams_* and acks/nacks count SotW and delta streams alike; "requests"
  holds SotW requests only);
- POST /heartbeat {"type_url"} sends heartbeats (above); answers {"streams": N};
- POST /config   {"up_to_date_style"?, "fetch_delay_ms"?, "no_sotw"?, "no_delta"?,
  "no_fetch"?, "no_absent"?} changes those switches at run time; answers the
  new config;
- GET /canned    {"health_check": <canonical JSON of the HDS answer>}.

Exits on SIGTERM, SIGINT or when stdin closes.
"""

import argparse
import base64
import hashlib
import itertools
import json
import os
import queue
import signal
import sys
import threading
import time
import urllib.parse
from concurrent import futures
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import grpc
from google.protobuf import any_pb2, duration_pb2, json_format

from xds_types import import_all_protos  # tests/support/, the script's directory


import_all_protos()

# pylint: disable=wrong-import-position
from envoy.service.discovery.v3 import ads_pb2_grpc, discovery_pb2  # noqa: E402
from envoy.service.health.v3 import hds_pb2, hds_pb2_grpc  # noqa: E402
from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc  # noqa: E402


def parse_args(argv):
    parser = argparse.ArgumentParser(description="reference xDS control plane")
    parser.add_argument("port", nargs="?", type=int, default=0)
    parser.add_argument("--strict-nonce", action="store_true")
    parser.add_argument("--no-sotw", action="store_true")
    parser.add_argument("--no-delta", action="store_true")
    parser.add_argument("--no-fetch", action="store_true")
    parser.add_argument("--no-absent", action="store_true")
    parser.add_argument("--up-to-date-style", choices=("go", "rust", "never"), default="go")
    parser.add_argument("--fetch-delay-ms", type=int, default=0)
    return parser.parse_args(argv)


ARGS = parse_args(sys.argv[1:])
_NONCES = itertools.count(1)
STRICT_NONCE = ARGS.strict_nonce

CDS = "type.googleapis.com/envoy.config.cluster.v3.Cluster"

# (service, method, type URL) of every unary discovery Fetch.
FETCH_SERVICES = (
    ("envoy.service.listener.v3.ListenerDiscoveryService", "FetchListeners",
     "type.googleapis.com/envoy.config.listener.v3.Listener"),
    ("envoy.service.route.v3.RouteDiscoveryService", "FetchRoutes",
     "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"),
    ("envoy.service.route.v3.ScopedRoutesDiscoveryService", "FetchScopedRoutes",
     "type.googleapis.com/envoy.config.route.v3.ScopedRouteConfiguration"),
    ("envoy.service.cluster.v3.ClusterDiscoveryService", "FetchClusters", CDS),
    ("envoy.service.endpoint.v3.EndpointDiscoveryService", "FetchEndpoints",
     "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"),
    ("envoy.service.secret.v3.SecretDiscoveryService", "FetchSecrets",
     "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.Secret"),
    ("envoy.service.runtime.v3.RuntimeDiscoveryService", "FetchRuntime",
     "type.googleapis.com/envoy.service.runtime.v3.Runtime"),
    ("envoy.service.extension.v3.ExtensionConfigDiscoveryService", "FetchExtensionConfigs",
     "type.googleapis.com/envoy.config.core.v3.TypedExtensionConfig"),
)

# The canned HDS answer: one cluster health check.
HDS_ANSWER = {
    "cluster_health_checks": [
        {
            "cluster_name": "hds_cluster",
            "health_checks": [
                {
                    "timeout": "1s",
                    "interval": "5s",
                    "unhealthy_threshold": 2,
                    "healthy_threshold": 2,
                    "http_health_check": {"path": "/healthz"},
                }
            ],
            "locality_endpoints": [
                {
                    "locality": {"region": "r1", "zone": "z1"},
                    "endpoints": [
                        {"address": {"socket_address": {"address": "127.0.0.1", "port_value": 8000}}}
                    ],
                }
            ],
        }
    ],
    "interval": "10s",
}


def status_of(request):
    if not request.HasField("error_detail"):
        return None
    return {"code": request.error_detail.code, "message": request.error_detail.message}


class ControlPlane:
    """Snapshots, open streams and what the streams sent."""

    def __init__(self):
        self.lock = threading.Lock()
        # type_url -> (version, {name: Any}) in insertion order
        self.snapshots = {}
        self.wrapped = {}  # type_url -> {name: ttl_ms or None}
        self.aliases = {}  # type_url -> {name: [alias...]}
        self.streams = set()  # queues of open streams
        self.streams_total = 0
        self.requests = []
        self.acks = 0
        self.nacks = 0
        self.delta_streams = set()
        self.delta_streams_total = 0
        self.delta_requests = []
        self.fetches = {}
        self.fetch_requests = []
        self.hds_requests = []
        self.csds_requests = []
        self.unimplemented = {"sotw": 0, "delta": 0, "fetch": 0}
        self.config = {
            "up_to_date_style": ARGS.up_to_date_style,
            "fetch_delay_ms": ARGS.fetch_delay_ms,
            "no_sotw": ARGS.no_sotw,
            "no_delta": ARGS.no_delta,
            "no_fetch": ARGS.no_fetch,
            "no_absent": ARGS.no_absent,
        }

    def set_snapshot(self, type_url, version, resources, wrapped=None, aliases=None):
        with self.lock:
            self.snapshots[type_url] = (version, resources)
            self.wrapped[type_url] = dict(wrapped or {})
            self.aliases[type_url] = {n: list(a) for n, a in (aliases or {}).items()}
            streams = list(self.streams)
        for events in streams:
            events.put(("snapshot", type_url))

    def wrapping(self, type_url):
        """{name: ttl_ms or None} of the resources sent wrapped."""
        with self.lock:
            return dict(self.wrapped.get(type_url, {}))

    def aliases_of(self, type_url):
        """{name: [alias...]} of the type's resources."""
        with self.lock:
            return dict(self.aliases.get(type_url, {}))

    def heartbeat(self, type_url):
        with self.lock:
            streams = list(self.streams)
        for events in streams:
            events.put(("heartbeat", type_url))
        return len(streams)

    def snapshot(self, type_url):
        with self.lock:
            return self.snapshots.get(type_url)

    def open_stream(self, events, delta=False):
        with self.lock:
            self.streams.add(events)
            self.streams_total += 1
            if delta:
                self.delta_streams.add(events)
                self.delta_streams_total += 1

    def close_stream(self, events):
        with self.lock:
            self.streams.discard(events)
            self.delta_streams.discard(events)

    def setting(self, key):
        with self.lock:
            return self.config[key]

    def configure(self, changes):
        allowed = {
            "up_to_date_style": lambda v: v in ("go", "rust", "never"),
            "fetch_delay_ms": lambda v: isinstance(v, int) and v >= 0,
            "no_sotw": lambda v: isinstance(v, bool),
            "no_delta": lambda v: isinstance(v, bool),
            "no_fetch": lambda v: isinstance(v, bool),
            "no_absent": lambda v: isinstance(v, bool),
        }
        for key, value in changes.items():
            if key not in allowed or not allowed[key](value):
                raise ValueError(f"bad config {key}={value!r}")
        with self.lock:
            self.config.update(changes)
            return dict(self.config)

    def refuse(self, what):
        """Counts a call to a disabled method (the caller then aborts)."""
        with self.lock:
            self.unimplemented[what] += 1

    def record_delta(self, request, kind):
        with self.lock:
            self.delta_requests.append(
                {
                    "type_url": request.type_url,
                    "subscribe": list(request.resource_names_subscribe),
                    "unsubscribe": list(request.resource_names_unsubscribe),
                    "initial_resource_versions": dict(request.initial_resource_versions),
                    "response_nonce": request.response_nonce,
                    "error_detail": status_of(request),
                    "has_node": request.HasField("node"),
                    "node_id": request.node.id if request.HasField("node") else None,
                    "user_agent_name": (
                        request.node.user_agent_name if request.HasField("node") else None
                    ),
                    "kind": kind,
                }
            )
            if kind == "ack":
                self.acks += 1
            elif kind == "nack":
                self.nacks += 1

    def record_fetch(self, type_url, request):
        with self.lock:
            self.fetches[type_url] = self.fetches.get(type_url, 0) + 1
            self.fetch_requests.append(
                {
                    "type_url": type_url,
                    "version_info": request.version_info,
                    "resource_names": list(request.resource_names),
                    "node_id": request.node.id if request.HasField("node") else None,
                }
            )

    def record_passthrough(self, what, entry):
        with self.lock:
            getattr(self, what).append(entry)

    def record_any(self, request, kind, delta):
        if delta:
            self.record_delta(request, kind)
        else:
            self.record(request, kind)

    def record(self, request, kind):
        error = status_of(request)
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
                    "user_agent_name": (
                        request.node.user_agent_name if request.HasField("node") else None
                    ),
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
                "delta_streams_total": self.delta_streams_total,
                "delta_streams_open": len(self.delta_streams),
                "delta_requests": list(self.delta_requests),
                "fetches": dict(self.fetches),
                "fetch_requests": list(self.fetch_requests),
                "hds_requests": list(self.hds_requests),
                "csds_requests": list(self.csds_requests),
                "unimplemented": dict(self.unimplemented),
                "config": dict(self.config),
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


def xdstp_parts(name):
    """(authority, type, id, params) of an xdstp name, or None."""
    parsed = urllib.parse.urlsplit(name)
    if parsed.scheme != "xdstp" or not parsed.netloc:
        return None
    resource_type, _, resource_id = parsed.path.lstrip("/").partition("/")
    if not resource_type or not resource_id:
        return None
    params = frozenset(urllib.parse.parse_qsl(parsed.query, keep_blank_values=True))
    return parsed.netloc, resource_type, urllib.parse.unquote(resource_id), params


def is_glob(name):
    parts = xdstp_parts(name)
    return parts is not None and (parts[2] == "*" or parts[2].endswith("/*"))


def in_collection(name, glob):
    """Whether the resource `name` belongs to the glob collection `glob`."""
    member, collection = xdstp_parts(name), xdstp_parts(glob)
    if member is None or collection is None or not is_glob(glob) or is_glob(name):
        return False
    parent = member[2].rpartition("/")[0]
    directory = collection[2][:-1]
    return (
        (parent + "/" if parent else "") == directory
        and member[0] == collection[0]
        and member[1] == collection[1]
        and member[3] == collection[3]
    )


VIRTUAL_HOST = "type.googleapis.com/envoy.config.route.v3.VirtualHost"
LB_ENDPOINT = "type.googleapis.com/envoy.config.endpoint.v3.LbEndpoint"
DELTA_ONLY = (VIRTUAL_HOST, LB_ENDPOINT)


def namespace_of(name):
    """A VHDS namespace: the part of `name` before its last "/"."""
    return name.rpartition("/")[0] if "/" in name else None


def subscribed(names, resource_name, type_url=None, aliases=()):
    """Whether a named subscription asks for `resource_name` (of `type_url`,
    resolving `aliases`): by name, glob collection, VHDS namespace or alias."""
    return (
        resource_name in names
        or any(in_collection(resource_name, n) for n in names)
        or (type_url == VIRTUAL_HOST and namespace_of(resource_name) in names)
        or any(alias in names for alias in aliases)
    )


def stands_for_a_set(type_url, name):
    """Whether a subscribed name is a set that is never signalled absent: a
    glob collection, or a VHDS namespace (a route configuration's name)."""
    return is_glob(name) or (type_url == VIRTUAL_HOST and "/" not in name)


def unimplemented(context, what):
    PLANE.refuse(what)
    context.abort(grpc.StatusCode.UNIMPLEMENTED, "Method not found!")


def resource_version(any_msg):
    """A delta per-resource version: a hash of the resource's bytes."""
    return hashlib.sha256(any_msg.SerializeToString(deterministic=True)).hexdigest()[:16]


class DeltaWatch:
    """One type on one delta stream."""

    def __init__(self, type_url):
        self.type_url = type_url
        self.wildcard = False
        self.names = set()
        self.known = {}  # name -> version the client has
        self.told_absent = set()  # subscribed names signalled as not existing
        self.nonce = None
        self.pending_first = True  # nothing sent yet for the type

    def wants(self, name, aliases=()):
        return self.wildcard or subscribed(self.names, name, self.type_url, aliases)


class StreamWatches(dict):
    """The watches of one stream by type URL, and every nonce it sent."""

    def __init__(self):
        super().__init__()
        self.sent = set()


def serve_stream(request_iterator, context, on_request, on_change, on_beat, delta=False):
    """Drives one ADS stream, SotW or delta: requests (read on a thread) and
    snapshot changes arrive as events; on_request(watches, request) and
    on_change(watches, type_url) return a response to send, or None."""
    events = queue.Queue()

    def read():
        try:
            for request in request_iterator:
                events.put(("request", request))
        except Exception:  # pylint: disable=broad-except
            pass
        events.put(("end", None))

    context.add_callback(lambda: events.put(("end", None)))
    PLANE.open_stream(events, delta=delta)
    threading.Thread(target=read, daemon=True).start()
    watches = StreamWatches()
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
                if payload.response_nonce and payload.response_nonce not in watches.sent:
                    PLANE.record_any(payload, "foreign", delta)
                    continue
                response = on_request(watches, payload)
            elif event == "heartbeat":
                response = on_beat(watches, payload)
            else:
                response = on_change(watches, payload)
            if response is not None:
                watches.sent.add(response.nonce)
                yield response
    finally:
        PLANE.close_stream(events)


def on_delta_change(watches, type_url):
    watch = watches.get(type_url)
    return delta_respond(type_url, watch) if watch else None


class Servicer(ads_pb2_grpc.AggregatedDiscoveryServiceServicer):
    def DeltaAggregatedResources(self, request_iterator, context):
        if PLANE.setting("no_delta"):
            unimplemented(context, "delta")
        yield from serve_stream(
            request_iterator,
            context,
            on_delta_request,
            on_delta_change,
            on_delta_beat,
            delta=True,
        )

    def StreamAggregatedResources(self, request_iterator, context):
        if PLANE.setting("no_sotw"):
            unimplemented(context, "sotw")
        yield from serve_stream(
            request_iterator, context, self.on_request, self.on_snapshot, self.on_beat
        )

    @staticmethod
    def on_request(watches, request):
        type_url = request.type_url
        if type_url in DELTA_ONLY:
            # Envoy serves these over delta only; a SotW server does not know them.
            PLANE.record(request, "delta-only")
            return None
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
    def on_beat(watches, type_url):
        watch = watches.get(type_url)
        snapshot = PLANE.snapshot(type_url)
        if watch is None or snapshot is None or snapshot[0] != watch.sent_version:
            return None
        return respond(type_url, watch, heartbeat=True)

    @staticmethod
    def on_snapshot(watches, type_url):
        watch = watches.get(type_url)
        if watch is None:
            return None
        snapshot = PLANE.snapshot(type_url)
        if snapshot is None or snapshot[0] == watch.sent_version:
            return None
        return respond(type_url, watch)


def ttl_of(ttl_ms):
    ttl = duration_pb2.Duration()
    ttl.FromMilliseconds(ttl_ms)
    return ttl


def wrapper(name, any_msg, ttl_ms):
    """`any_msg` (None: a heartbeat) wrapped in a Resource, as an Any."""
    wrapped = discovery_pb2.Resource(name=name)
    if any_msg is not None:
        wrapped.resource.CopyFrom(any_msg)
    if ttl_ms is not None:
        wrapped.ttl.CopyFrom(ttl_of(ttl_ms))
    out = any_pb2.Any()
    out.Pack(wrapped)
    return out


def respond(type_url, watch, heartbeat=False):
    """The response for `watch` now, or None while there is no snapshot."""
    snapshot = PLANE.snapshot(type_url)
    if snapshot is None:
        return None
    version, resources = snapshot
    if watch.names is None:
        names = list(resources)
    else:
        names = [n for n in sorted(resources) if subscribed(watch.names, n)]
    wrapping = PLANE.wrapping(type_url)
    chosen = []
    for name in names:
        if name not in wrapping:
            chosen.append(resources[name])
        elif heartbeat and wrapping[name] is not None:
            chosen.append(wrapper(name, None, wrapping[name]))
        else:
            chosen.append(wrapper(name, resources[name], wrapping[name]))
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


def on_delta_request(watches, request):
    type_url = request.type_url
    watch = watches.get(type_url)
    first = watch is None
    if first:
        kind = "subscribe"
        watch = DeltaWatch(type_url)
        watches[type_url] = watch
        watch.known = dict(request.initial_resource_versions)
        if not request.resource_names_subscribe:
            watch.wildcard = True  # legacy wildcard
    elif request.response_nonce:
        if request.response_nonce != watch.nonce:
            kind = "stale"
        elif request.HasField("error_detail"):
            kind = "nack"
        else:
            kind = "ack"
    else:
        kind = "request"
    PLANE.record_delta(request, kind)
    initial = request.initial_resource_versions
    aliases = PLANE.aliases_of(type_url)
    for name in request.resource_names_subscribe:
        if name == "*":
            watch.wildcard = True
            continue
        watch.names.add(name)
        watch.told_absent.discard(name)
        if name not in initial:
            # A subscribed name is always (re)sent; an alias by the
            # resource it resolves to, now naming the alias.
            watch.known.pop(name, None)
            for resolved, its_aliases in aliases.items():
                if name in its_aliases:
                    watch.known.pop(resolved, None)
    for name in request.resource_names_unsubscribe:
        if name == "*":
            watch.wildcard = False
        else:
            watch.names.discard(name)
            watch.told_absent.discard(name)
    for name in list(watch.known):
        if not watch.wants(name, aliases.get(name, ())):
            del watch.known[name]
    if kind in ("ack", "nack", "stale") and not (
        request.resource_names_subscribe or request.resource_names_unsubscribe
    ):
        return None
    return delta_respond(type_url, watch)


def delta_respond(type_url, watch):
    """The delta response `watch` needs now, or None (nothing to say, or no
    snapshot of the type yet)."""
    snapshot = PLANE.snapshot(type_url)
    if snapshot is None:
        return None
    version, resources = snapshot
    aliases = PLANE.aliases_of(type_url)
    added = []
    for name, any_msg in resources.items():
        its_aliases = aliases.get(name, [])
        if not watch.wants(name, its_aliases):
            continue
        resource_v = resource_version(any_msg)
        if watch.known.get(name) != resource_v:
            asked = [a for a in its_aliases if a in watch.names]
            added.append(
                discovery_pb2.Resource(
                    name=name, version=resource_v, resource=any_msg, aliases=asked
                )
            )
            ttl_ms = PLANE.wrapping(type_url).get(name)
            if ttl_ms is not None:
                added[-1].ttl.CopyFrom(ttl_of(ttl_ms))
    removed = sorted(n for n in watch.known if n not in resources)
    resolved = {a for its_aliases in aliases.values() for a in its_aliases}
    absent = sorted(
        n
        for n in watch.names
        if n not in resources
        and n not in resolved
        and n not in watch.known
        and n not in watch.told_absent
        and not stands_for_a_set(type_url, n)
    )
    if PLANE.setting("no_absent"):
        absent = []
    first_wildcard = watch.pending_first and watch.wildcard
    if not (added or removed or absent or first_wildcard):
        return None
    for resource in added:
        watch.known[resource.name] = resource.version
        watch.told_absent.discard(resource.name)
    for name in removed:
        del watch.known[name]
        watch.told_absent.add(name)
    watch.told_absent.update(absent)
    watch.pending_first = False
    nonce = str(next(_NONCES))
    watch.nonce = nonce
    return discovery_pb2.DeltaDiscoveryResponse(
        system_version_info=version,
        resources=added + [discovery_pb2.Resource(name=n) for n in absent],
        type_url=type_url,
        removed_resources=removed,
        nonce=nonce,
    )


def on_delta_beat(watches, type_url):
    watch = watches.get(type_url)
    if watch is None:
        return None
    beats = [
        discovery_pb2.Resource(name=name, version=watch.known[name], ttl=ttl_of(ttl_ms))
        for name, ttl_ms in sorted(PLANE.wrapping(type_url).items())
        if ttl_ms is not None and name in watch.known
    ]
    if not beats:
        return None
    snapshot = PLANE.snapshot(type_url)
    nonce = str(next(_NONCES))
    watch.nonce = nonce
    return discovery_pb2.DeltaDiscoveryResponse(
        system_version_info=snapshot[0] if snapshot else "",
        resources=beats,
        type_url=type_url,
        nonce=nonce,
    )


def fetch_handler(type_url):
    def fetch(request, context):
        if PLANE.setting("no_fetch"):
            unimplemented(context, "fetch")
        PLANE.record_fetch(type_url, request)
        delay = PLANE.setting("fetch_delay_ms")
        if delay:
            time.sleep(delay / 1000.0)
        snapshot = PLANE.snapshot(type_url)
        if snapshot is None:
            # go-control-plane's words (a plain error: gRPC UNKNOWN).
            context.abort(grpc.StatusCode.UNKNOWN, f"missing snapshot for {request.node.id!r}")
        version, resources = snapshot
        style = PLANE.setting("up_to_date_style")
        if request.version_info and request.version_info == version and style != "never":
            if style == "rust":
                context.abort(grpc.StatusCode.ALREADY_EXISTS, "version up to date")
            context.abort(grpc.StatusCode.UNKNOWN, "skip fetch: version up to date")
        names = [n for n in request.resource_names if n != "*"]
        if names:
            chosen = [resources[n] for n in sorted(set(names)) if n in resources]
        else:
            chosen = list(resources.values())
        return discovery_pb2.DiscoveryResponse(
            version_info=version,
            resources=chosen,
            type_url=type_url,
            nonce=str(next(_NONCES)),
        )

    return fetch


def fetch_handlers():
    handlers = []
    for service, method, type_url in FETCH_SERVICES:
        handler = grpc.unary_unary_rpc_method_handler(
            fetch_handler(type_url),
            request_deserializer=discovery_pb2.DiscoveryRequest.FromString,
            response_serializer=discovery_pb2.DiscoveryResponse.SerializeToString,
        )
        handlers.append(grpc.method_handlers_generic_handler(service, {method: handler}))
    return handlers


def hds_answer():
    return json_format.ParseDict(HDS_ANSWER, hds_pb2.HealthCheckSpecifier())


class HealthServicer(hds_pb2_grpc.HealthDiscoveryServiceServicer):
    def FetchHealthCheck(self, request, context):
        message = json_format.MessageToDict(request.health_check_request)
        PLANE.record_passthrough(
            "hds_requests",
            {
                "node_id": request.health_check_request.node.id,
                "health_check_protocols": message.get("capability", {}).get(
                    "healthCheckProtocols", []
                ),
            },
        )
        return hds_answer()


class ClientStatusServicer(csds_pb2_grpc.ClientStatusDiscoveryServiceServicer):
    def FetchClientStatus(self, request, context):
        answer = {
            "config": [
                {
                    "node": {"id": request.node.id, "cluster": request.node.cluster},
                    "generic_xds_configs": [
                        {
                            "type_url": CDS,
                            "name": "csds_cluster",
                            "version_info": "v1",
                            "xds_config": {
                                "@type": CDS,
                                "name": "csds_cluster",
                                "connect_timeout": "1s",
                            },
                            "config_status": "SYNCED",
                            "client_status": "ACKED",
                        }
                    ],
                }
            ]
        }
        response = json_format.ParseDict(answer, csds_pb2.ClientStatusResponse())
        PLANE.record_passthrough(
            "csds_requests",
            {
                "node_id": request.node.id,
                "exclude_resource_contents": request.exclude_resource_contents,
                "response": json_format.MessageToDict(response),
            },
        )
        return response


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
        elif self.path == "/canned":
            self.reply(200, {"health_check": json_format.MessageToDict(hds_answer())})
        else:
            self.reply(404, {"error": f"no {self.path}"})

    def do_POST(self):
        try:
            length = int(self.headers.get("Content-Length", "0"))
            body = json.loads(self.rfile.read(length) or b"{}")
            if self.path == "/config":
                self.reply(200, PLANE.configure(body))
                return
            if self.path == "/heartbeat":
                self.reply(200, {"streams": PLANE.heartbeat(body["type_url"])})
                return
            type_url = body["type_url"]
            version = body["version"]
            resources = {}
            canonical = []
            if self.path == "/set":
                names = body.get("names")
                for i, item in enumerate(body.get("resources", [])):
                    text = item if isinstance(item, str) else json.dumps(item)
                    any_msg = json_format.Parse(text, any_pb2.Any())
                    name = names[i] if names else resource_name(json.loads(text), i)
                    resources[name] = any_msg
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
        PLANE.set_snapshot(type_url, version, resources, body.get("wrap"), body.get("aliases"))
        self.reply(200, {"resources": canonical})


def main():
    port = ARGS.port
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=128))
    ads_pb2_grpc.add_AggregatedDiscoveryServiceServicer_to_server(Servicer(), server)
    hds_pb2_grpc.add_HealthDiscoveryServiceServicer_to_server(HealthServicer(), server)
    csds_pb2_grpc.add_ClientStatusDiscoveryServiceServicer_to_server(
        ClientStatusServicer(), server
    )
    server.add_generic_rpc_handlers(fetch_handlers())
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
