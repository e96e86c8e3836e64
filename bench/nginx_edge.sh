#!/usr/bin/env bash
# Issue 27: client requests/s through nginx (deploy/nginx/xds-gateway-cache.conf)
# against direct, and the gateway's CPU per client request with and without
# the edge, in one run. wrk polls one discovery URL; the gateway's CPU is
# read from /proc/<pid>/stat (utime+stime) around each run. Rows: direct
# without a validator (every request a 200 from the gateway's memoised
# body), direct presenting the current ETag (every request a 304), and
# through nginx (bodies from nginx; the gateway sees its revalidations).
# Loopback on one machine: wrk, nginx (one worker) and the gateway share
# its cores.
#
#   cargo build --release && bench/nginx_edge.sh [target/release/xds-gateway]
#
# Env: DURATION (default 5s), CONNECTIONS (default 50), THREADS (default 2).
set -euo pipefail
cd "$(dirname "$0")/.."
GW="${1:-${CARGO_TARGET_DIR:-target}/release/xds-gateway}"
NGINX="$(command -v nginx || echo /usr/sbin/nginx)"
DURATION="${DURATION:-5s}" CONNECTIONS="${CONNECTIONS:-50}" THREADS="${THREADS:-2}"
command -v wrk >/dev/null || { echo "wrk is missing: apt-get install -y wrk" >&2; exit 1; }
[ -x "$NGINX" ] || { echo "nginx is missing: apt-get install -y nginx" >&2; exit 1; }

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
dir="$(mktemp -d)"
rest="$(free_port)" admin="$(free_port)" edge="$(free_port)"
pids=()
cleanup() { for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done; rm -rf "$dir"; }
trap cleanup EXIT

"$GW" --listen "127.0.0.1:$rest" --admin "127.0.0.1:$admin" --cache-max-age 1s \
  >"$dir/gateway.log" 2>&1 &
gw_pid=$!; pids+=("$gw_pid")
sed -e "s|127.0.0.1:8080|127.0.0.1:$rest|" -e "s|127.0.0.1:8081|127.0.0.1:$edge|" \
  -e "s|/var/cache/nginx/xds-gateway|$dir/cache|" deploy/nginx/xds-gateway-cache.conf >"$dir/site.conf"
cat >"$dir/nginx.conf" <<CONF
daemon off; master_process off; worker_processes 1; pid $dir/nginx.pid;
error_log $dir/error.log; events { worker_connections 4096; }
http { access_log off; client_body_temp_path $dir/cb; proxy_temp_path $dir/pt;
  fastcgi_temp_path $dir/fc; uwsgi_temp_path $dir/uw; scgi_temp_path $dir/sc;
  include $dir/site.conf; }
CONF
"$NGINX" -p "$dir" -c "$dir/nginx.conf" -e "$dir/error.log" &
pids+=("$!")

url="/v3/discovery:clusters?node=demo&cluster=demo"
for _ in $(seq 100); do
  curl -fsS "http://127.0.0.1:$rest$url" >/dev/null 2>&1 && curl -fsS "http://127.0.0.1:$edge$url" >/dev/null 2>&1 && break
  sleep 0.1
done

ticks() { awk '{print $14 + $15}' "/proc/$gw_pid/stat"; }
hz="$(getconf CLK_TCK)"
metric() { curl -fsS "http://127.0.0.1:$admin/metrics" | awk -v s="$1" '$0 ~ "^xds_gateway_requests_total\\{type=\"clusters\",status=\"" s "\"\\}" {print $2}' | head -1; }

run() { # name port [wrk args...]
  local name="$1" port="$2"; shift 2
  local before after out reqs rps ok0 nm0 ok1 nm1
  ok0="$(metric 200)" nm0="$(metric 304)"
  before="$(ticks)"
  out="$(wrk -t"$THREADS" -c"$CONNECTIONS" -d"$DURATION" "$@" "http://127.0.0.1:$port$url")"
  after="$(ticks)"
  ok1="$(metric 200)" nm1="$(metric 304)"
  reqs="$(echo "$out" | awk '/requests in/ {print $1}')"
  rps="$(echo "$out" | awk '/Requests\/sec/ {print $2}')"
  awk -v n="$name" -v r="$reqs" -v rps="$rps" -v t=$((after - before)) -v hz="$hz" \
      -v ok=$(( ${ok1%.*} - ${ok0%.*} )) -v nm=$(( ${nm1:-0} - ${nm0:-0} )) 'BEGIN {
    printf "| %-14s | %9.0f | %9d | %6.2f | %9.2f | %7d | %7d |\n", n, rps, r, t/hz, (t/hz)*1e6/r, ok, nm }'
}
echo "wrk -t$THREADS -c$CONNECTIONS -d$DURATION GET $url; gateway --cache-max-age 1s"
echo "| path          | client req/s | client requests | gateway CPU s | gateway CPU µs per client request | gateway 200s | gateway 304s |"
echo "|---|---:|---:|---:|---:|---:|---:|"
etag="$(curl -fsS -o /dev/null -D - "http://127.0.0.1:$rest$url" | tr -d '\r' | awk -F': ' 'tolower($1) == "etag" {print $2}')"
run "direct" "$rest"
run "direct, 304s" "$rest" -H "If-None-Match: $etag"
run "through nginx" "$edge"
