"""Protobuf's reference JSON mapping, for tests/json_reference.rs.

Reads JSON requests from stdin, one per line, and writes one JSON response
line per request, in order:

  {"op": "roundtrip", "items": ["<JSON Any text>", ...]}
      -> {"results": [{"type_url": ..., "value_hex": ..., "json": ...}, ...]}
  {"op": "parse", "items": ["<JSON Any text>", ...]}
      -> {"results": [{"type_url": ..., "value_hex": ...}, ...]}

Each item is parsed with json_format.Parse into a google.protobuf.Any (so the
text must carry "@type"); `value_hex` is the Any's payload (the serialized
inner message) in hex and `json` is json_format.MessageToJson of the Any. An
item that fails gives {"error": "..."} instead. Items may also be JSON objects,
which are re-encoded as text first.
"""

import json
import sys

from google.protobuf import any_pb2, json_format

from xds_types import import_all_protos  # tests/support/, the script's directory


def convert(op, item):
    text = item if isinstance(item, str) else json.dumps(item)
    try:
        message = json_format.Parse(text, any_pb2.Any())
        result = {"type_url": message.type_url, "value_hex": message.value.hex()}
        if op == "roundtrip":
            result["json"] = json_format.MessageToJson(message, indent=None)
        return result
    except Exception as err:  # pylint: disable=broad-except
        return {"error": f"{type(err).__name__}: {err}"}


def main():
    import_all_protos()
    for line in sys.stdin:
        if not line.strip():
            continue
        request = json.loads(line)
        op = request.get("op")
        if op not in ("roundtrip", "parse"):
            response = {"error": f"unknown op {op!r}"}
        else:
            response = {"results": [convert(op, item) for item in request["items"]]}
        sys.stdout.write(json.dumps(response) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
