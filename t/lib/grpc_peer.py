"""A gRPC server and client for t/grpc.t, from Debian's python3-grpcio.

No generated code: the services are grpc's generic handlers and the
messages raw bytes, so nothing but grpcio is needed (t/lib/RLGrpc.pm).

  grpc_peer.py server PORT DIR   serves until killed; prints "ready"
  grpc_peer.py call TARGET JSON  makes the calls JSON lists, one after the
                                 other (a channel for each service config);
                                 prints their results as a JSON list

Every service (its name is the call's, so nginx can route by location)
has the methods:
  Unary   answers "served:" and the request
  Stream  answers three messages, "m0", "m1", "m2"
  Hold    writes DIR/held, waits for DIR/release (at most 60 s), answers
and any other method is Unary.

A call: {"method": "/svc/Unary", "metadata": [["x-key", "a"]],
"service_config": {...} (the channel's, with retries on)}.  Its result:
{"code": "OK" or a status name, "details", "initial" and "trailing" (the
metadata, as lists of pairs), "messages", "start", "end" (the wall clock,
in seconds)}.
"""

import json
import os
import sys
import time
from concurrent import futures

import grpc


def server(port, directory):
    def unary(request, context):
        return b"served:" + request

    def stream(request, context):
        for i in range(3):
            yield b"m%d" % i

    def hold(request, context):
        open(os.path.join(directory, "held"), "w").close()
        end = time.time() + 60
        while time.time() < end and not os.path.exists(os.path.join(directory, "release")):
            time.sleep(0.01)
        return b"held"

    methods = {
        "Unary": grpc.unary_unary_rpc_method_handler(unary),
        "Stream": grpc.unary_stream_rpc_method_handler(stream),
        "Hold": grpc.unary_unary_rpc_method_handler(hold),
    }

    class Any(grpc.GenericRpcHandler):
        # every service name has the same methods
        def service(self, details):
            return methods.get(details.method.rsplit("/", 1)[-1], methods["Unary"])

    s = grpc.server(futures.ThreadPoolExecutor(max_workers=16))
    s.add_generic_rpc_handlers((Any(),))
    s.add_insecure_port("127.0.0.1:%d" % port)
    s.start()
    print("ready", flush=True)
    s.wait_for_termination()


def pairs(metadata):
    return [[k, v if isinstance(v, str) else v.decode("latin-1")] for k, v in (metadata or [])]


def call(channel, spec):
    method = spec["method"]
    md = [tuple(p) for p in spec.get("metadata", [])]
    out = {"start": time.time(), "messages": []}
    if method.endswith("/Stream"):
        it = channel.unary_stream(method)(b"hello", metadata=md, timeout=30)
        try:
            for m in it:
                out["messages"].append(m.decode())
        except grpc.RpcError:
            pass
        c = it
    else:
        c = None
        try:
            m, c = channel.unary_unary(method).with_call(b"hello", metadata=md, timeout=30)
            out["messages"].append(m.decode())
        except grpc.RpcError as e:
            c = e
    out["end"] = time.time()
    out["code"] = c.code().name
    out["details"] = c.details()
    out["initial"] = pairs(c.initial_metadata())
    out["trailing"] = pairs(c.trailing_metadata())
    return out


def client(target, calls):
    results = []
    channels = {}
    for spec in calls:
        config = json.dumps(spec.get("service_config"))
        if config not in channels:
            options = []
            if "service_config" in spec:
                options = [("grpc.enable_retries", 1), ("grpc.service_config", config)]
            channels[config] = grpc.insecure_channel(target, options=options)
        results.append(call(channels[config], spec))
    print(json.dumps(results), flush=True)
    # closing a channel may take seconds: the results are out already
    os._exit(0)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), sys.argv[3])
    else:
        client(sys.argv[2], json.loads(sys.argv[3]))
