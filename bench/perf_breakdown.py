#!/usr/bin/env python3
"""Where a poll's time goes: groups the self time of a `perf record` profile
of the gateway process into the stages of a poll.

    perf record -e cpu-clock -F 999 -p "$(pgrep -f 'release/xds-gateway --upstream')" \\
        -o perf.data -- sleep 10      # while `GATEWAY_BENCH=external cargo bench --bench gateway` runs
    python3 bench/perf_breakdown.py perf.data

Stages are matched on symbol names, first match wins; what matches nothing is
"other". Self time only (release builds have no frame pointers, so call
chains are unreliable): kernel time is split by what the kernel was doing.
"""

import re
import subprocess
import sys

STAGES = [
    ("memo key (xxh3)", r"xxhash_rust|xxh3"),
    ("memo confirm (memcmp)", r"memcmp"),
    ("request parse (view)", r"DiscoveryRequestView|xds::request|ParsedRequest::parse|serde_json"),
    ("kernel: receive", r"copy_to_iter|recv|tcp_rcv|tcp_data_queue|skb_release|sock_rfree|skb_copy|__inet_lookup|tcp_v4_rcv|ip_rcv|net_rx|process_backlog|__netif"),
    ("kernel: send", r"copy_from_iter|tcp_sendmsg|tcp_write_xmit|tcp_transmit|ip_output|ip_finish|dev_queue|loopback_xmit|__tcp_push|tcp_ack"),
    ("kernel: scheduling and wakeups", r"spin_unlock|spin_lock|finish_task_switch|schedule|futex|try_to_wake|epoll|ep_poll|__wake_up|irqentry|exc_page_fault|syscall|entry_SYSCALL|do_syscall"),
    ("allocator", r"^(malloc|_int_malloc|_int_free|cfree|free|realloc|malloc_consolidate|unlink_chunk|__libc_malloc|__libc_free)"),
    ("copies and buffers (memmove, bytes)", r"memmove|memcpy|^bytes::"),
    ("sessions, answer, clients, metrics (xds_gateway)", r"xds_gateway::(source|cache|metrics|http)|prometheus"),
    ("caches and channels (moka, hashbrown, crossbeam)", r"moka|hashbrown|crossbeam|BuildHasher|quanta"),
    ("connection handling (xds_gateway::serve)", r"xds_gateway::serve"),
    ("HTTP (hyper, axum, tower, http)", r"hyper|axum|tower|^http::|h2::|httparse"),
    ("runtime (tokio, time)", r"tokio|clock_gettime|mio::|parking_lot|atomic_waker"),
]


def main(path):
    report = subprocess.run(
        ["perf", "report", "-i", path, "--no-children", "--sort", "symbol", "--stdio"],
        capture_output=True, text=True, check=True,
    ).stdout
    totals = {name: 0.0 for name, _ in STAGES}
    totals["kernel: other"] = 0.0
    totals["other"] = 0.0
    line_re = re.compile(r"^\s*([0-9.]+)%\s+\[([.k])\]\s+(.*?)\s*(?:-\s+-\s*)?$")
    for line in report.splitlines():
        m = line_re.match(line)
        if not m:
            continue
        share, kernel, symbol = float(m.group(1)), m.group(2) == "k", m.group(3).strip()
        for name, pattern in STAGES:
            if re.search(pattern, symbol):
                totals[name] += share
                break
        else:
            totals["kernel: other" if kernel else "other"] += share
    print("| stage | share of the gateway's CPU |")
    print("|---|---|")
    for name, share in sorted(totals.items(), key=lambda kv: -kv[1]):
        print(f"| {name} | {share:.1f} % |")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(sys.argv[1])
