#!/usr/bin/env python3
"""Reads a gateway watch stream with sseclient-py over requests: a
maintained SSE client nobody here wrote, parsing what the gateway sends.

usage: sse_client.py URL COUNT [LAST_EVENT_ID]

Prints one JSON line for the response ({"status", "content_type"}), then one
per event, as sseclient-py parsed it: {"id", "event", "version" (the data's
versionInfo), "names" (the resources' names)}; exits after COUNT events.
"""

import json
import sys

try:
    import requests
    import sseclient
except ImportError as err:  # say how to get it, never skip
    sys.exit(
        f"sse_client.py: {err}; install the test dependencies: "
        ".venv/bin/pip install -r tests/support/requirements.txt"
    )


def main():
    url, count = sys.argv[1], int(sys.argv[2])
    headers = {"Accept": "text/event-stream"}
    if len(sys.argv) > 3:
        headers["Last-Event-ID"] = sys.argv[3]
    with requests.get(url, headers=headers, stream=True, timeout=(5, 60)) as response:
        print(
            json.dumps(
                {
                    "status": response.status_code,
                    "content_type": response.headers.get("content-type"),
                }
            ),
            flush=True,
        )
        if response.status_code != 200 or count == 0:
            return
        seen = 0
        for event in sseclient.SSEClient(response).events():
            data = json.loads(event.data)
            names = [r.get("name", "") for r in data.get("resources", [])]
            print(
                json.dumps(
                    {
                        "id": event.id,
                        "event": event.event,
                        "version": data.get("versionInfo"),
                        "names": names,
                    }
                ),
                flush=True,
            )
            seen += 1
            if seen >= count:
                return


if __name__ == "__main__":
    main()
