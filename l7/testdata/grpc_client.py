#!/usr/bin/env python3
"""A gRPC client on Python's grpcio (a second implementation beside grpc-go) for the L7 tests:
it calls the interop TestService through the proxy with hand-encoded protobuf messages (no
generated stubs needed) and prints one JSON object of what it saw."""
import json
import sys

import grpc

SVC = "/grpc.testing.TestService/"


def varint(n):
    out = bytearray()
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def field(num, value):
    if isinstance(value, int):
        return varint(num << 3) + varint(value)
    return varint(num << 3 | 2) + varint(len(value)) + value


def payload(n):
    return field(2, b"p" * n)  # Payload.body


def read_varint(buf, i):
    shift = result = 0
    while True:
        b = buf[i]
        i += 1
        result |= (b & 0x7F) << shift
        shift += 7
        if not b & 0x80:
            return result, i


def main():
    addr = sys.argv[1]
    opts = [("grpc.max_receive_message_length", 8 << 20), ("grpc.max_send_message_length", 8 << 20)]
    out = {}
    with grpc.insecure_channel(addr, options=opts) as ch:
        unary = ch.unary_unary(SVC + "UnaryCall")
        req = field(2, 1 << 20) + field(3, payload(1 << 20))  # response_size, payload
        resp, call = unary.with_call(req, timeout=20,
                                     metadata=[("x-grpc-test-echo-trailing-bin", b"\x00\x01\xfe")])
        out["unary_bytes"] = len(resp)
        out["trailing_bin"] = [list(v) for k, v in call.trailing_metadata() if k == "x-grpc-test-echo-trailing-bin"]

        try:
            unary(field(7, field(1, 5) + field(2, b"nope")), timeout=20)  # response_status NOT_FOUND
            out["status"] = "OK"
        except grpc.RpcError as e:
            out["status"] = e.code().name
            out["status_details"] = e.details()

        stream_out = ch.unary_stream(SVC + "StreamingOutputCall")
        sizes = [1, 31415, 0, 65536]
        req = b"".join(field(2, field(1, n)) for n in sizes)  # response_parameters {size}
        out["server_stream_messages"] = len(list(stream_out(req, timeout=20)))

        stream_in = ch.stream_unary(SVC + "StreamingInputCall")
        resp = stream_in(iter([field(1, payload(n)) for n in (27182, 8, 1828, 45904)]), timeout=20)
        out["aggregated"] = read_varint(resp, 1)[0] if resp else 0

        duplex = ch.stream_stream(SVC + "FullDuplexCall")
        reqs = [field(2, field(1, n)) + field(3, payload(n)) for n in (31415, 9, 2653, 58979)]
        out["duplex_messages"] = len(list(duplex(iter(reqs), timeout=20)))
    print(json.dumps(out))


if __name__ == "__main__":
    main()
