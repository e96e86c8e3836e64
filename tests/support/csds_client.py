"""A CSDS client nobody here wrote the server side of: grpcio with the
xds-protos stubs. Asks 127.0.0.1:PORT for FetchClientStatus (and, with
--stream, one StreamClientStatus round trip) and prints each
ClientStatusResponse as JSON (protobuf's json_format), one per line.

    csds_client.py PORT [--node ID] [--stream] [--token T]
"""

import argparse
import json
import sys

import grpc
from google.protobuf import json_format

from envoy.service.status.v3 import csds_pb2, csds_pb2_grpc
from envoy.type.matcher.v3 import node_pb2, string_pb2
from xds_types import import_all_protos


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("port", type=int)
    parser.add_argument("--node")
    parser.add_argument("--stream", action="store_true")
    parser.add_argument("--token")
    args = parser.parse_args()
    import_all_protos()
    request = csds_pb2.ClientStatusRequest()
    if args.node:
        request.node_matchers.append(
            node_pb2.NodeMatcher(node_id=string_pb2.StringMatcher(exact=args.node))
        )
    metadata = [("authorization", f"Bearer {args.token}")] if args.token else []
    with grpc.insecure_channel(f"127.0.0.1:{args.port}") as channel:
        stub = csds_pb2_grpc.ClientStatusDiscoveryServiceStub(channel)
        try:
            answers = [stub.FetchClientStatus(request, timeout=10, metadata=metadata)]
            if args.stream:
                answers += list(
                    stub.StreamClientStatus(iter([request]), timeout=10, metadata=metadata)
                )
        except grpc.RpcError as error:
            print(json.dumps({"grpc_error": error.code().name, "details": error.details()}))
            return 0
    for answer in answers:
        print(json.dumps(json_format.MessageToDict(answer)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
