#!/usr/bin/env python3
"""An upstream of known capacity and an open-loop load generator, for
algorithm=adaptive's end-to-end test (t/adaptive.t) and its benchmark
(bench/adaptive.pl).  Python 3's standard library only.

  rl_adaptive.py upstream PORT_FILE --workers W --mean-ms S [--sigma 0.5]
      An HTTP/1.1 server on a free loopback port (written to PORT_FILE) with
      W workers, each serving one request at a time for a log-normal service
      time of mean S ms; requests beyond W wait in arrival order, served
      even if their client has gone (as a real backend's queue does).
      GET /set?mean=MS changes the mean at once (answered at once).
      GET /close answers nothing and closes (nginx: 502); GET /hang never
      answers.  Anything else is served: "ok".

  rl_adaptive.py load URL --steps RATE:SECONDS[,RATE:SECONDS...]
      [--timeout 1] [--at-step N:URL ...]
      Open-loop: requests start at exponential gaps of mean 1/RATE whatever
      the answers, each on its own connection, abandoned after --timeout
      seconds.  Prints one JSON line a second: {"t":..., "step":...,
      "rate":..., "sent":..., "ok":... (2xx within the timeout), "refused":
      ... (429 or 503), "other":..., "timeouts":..., "p50_ms":..., "p99_ms":...
      (of the 2xx)}; --at-step N:URL fetches URL when step N starts.
"""
import argparse
import asyncio
import json
import math
import random
import socket
import sys
import time


# ---- the upstream ----------------------------------------------------------

class Upstream:
    def __init__(self, workers, mean_ms, sigma, seed):
        self.sem = asyncio.Semaphore(workers)
        self.mean_ms = mean_ms
        self.sigma = sigma
        self.rng = random.Random(seed)
        self.served = 0

    def service_s(self):
        mu = math.log(self.mean_ms) - self.sigma * self.sigma / 2
        return self.rng.lognormvariate(mu, self.sigma) / 1000.0

    async def handle(self, reader, writer):
        try:
            while True:
                line = await reader.readline()
                if not line:
                    break
                while True:
                    h = await reader.readline()
                    if h in (b"\r\n", b"\n", b""):
                        break
                parts = line.split()
                path = parts[1].decode() if len(parts) > 1 else "/"
                if path.startswith("/set?mean="):
                    self.mean_ms = float(path.split("=", 1)[1])
                    body = b"set"
                elif path == "/close":
                    break
                elif path == "/hang":
                    await asyncio.sleep(3600)
                    break
                else:
                    async with self.sem:  # FIFO: waiters in arrival order
                        await asyncio.sleep(self.service_s())
                    self.served += 1
                    body = b"ok"
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                             b"Content-Type: text/plain\r\n\r\n%s" % (len(body), body))
                await writer.drain()
        except (ConnectionError, asyncio.IncompleteReadError):
            pass
        finally:
            writer.close()


async def run_upstream(args):
    up = Upstream(args.workers, args.mean_ms, args.sigma, args.seed)
    server = await asyncio.start_server(up.handle, "127.0.0.1", 0, backlog=4096)
    port = server.sockets[0].getsockname()[1]
    with open(args.port_file + ".tmp", "w") as f:
        f.write("%d\n" % port)
    import os
    os.rename(args.port_file + ".tmp", args.port_file)
    async with server:
        await server.serve_forever()


# ---- the load generator ----------------------------------------------------

class Second:
    def __init__(self):
        self.sent = self.ok = self.refused = self.other = self.timeouts = 0
        self.lat = []


async def one(host, port, path, timeout, sec):
    start = time.monotonic()
    writer = None
    try:
        async def go():
            nonlocal writer
            reader, writer = await asyncio.open_connection(host, port)
            writer.write(("GET %s HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n" % path).encode())
            await writer.drain()
            status_line = await reader.readline()
            await reader.read()
            return int(status_line.split()[1]) if status_line else 0
        status = await asyncio.wait_for(go(), timeout)
        ms = (time.monotonic() - start) * 1000
        if 200 <= status < 300:
            sec.ok += 1
            sec.lat.append(ms)
        elif status in (429, 503):
            sec.refused += 1
        else:
            sec.other += 1
    except asyncio.TimeoutError:
        sec.timeouts += 1
    except (ConnectionError, OSError, ValueError, IndexError):
        sec.other += 1
    finally:
        if writer is not None:
            writer.close()


def pct(values, p):
    if not values:
        return None
    v = sorted(values)
    return round(v[min(len(v) - 1, int(math.ceil(p / 100.0 * len(v))) - 1)], 1)


async def fetch(url):
    host, port, path = split(url)
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(("GET %s HTTP/1.1\r\nHost: b\r\nConnection: close\r\n\r\n" % path).encode())
    await writer.drain()
    await reader.readline()  # its status: done (the upstream keeps the connection)
    writer.close()


def split(url):
    rest = url.split("://", 1)[1]
    hostport, _, path = rest.partition("/")
    host, _, port = hostport.partition(":")
    return host, int(port), "/" + path


async def run_load(args):
    host, port, path = split(args.url)
    steps = [(float(r), float(s)) for r, s in (x.split(":") for x in args.steps.split(","))]
    at_step = {}
    for a in args.at_step or []:
        n, url = a.split(":", 1)
        at_step[int(n)] = url
    rng = random.Random(args.seed)
    seconds = []  # (step, rate, Second)
    tasks = set()
    t0 = time.monotonic()
    step_start = t0
    for i, (rate, dur) in enumerate(steps):
        if i in at_step:
            await fetch(at_step[i])
        step_start = time.monotonic()
        n_sec = int(round(dur))
        for k in range(n_sec):
            seconds.append((i, rate, Second()))
        nxt = step_start + rng.expovariate(rate)
        end = step_start + dur
        while True:
            now = time.monotonic()
            if nxt >= end:
                break
            if nxt > now:
                await asyncio.sleep(nxt - now)
            idx = len(seconds) - n_sec + min(n_sec - 1, int(nxt - step_start))
            sec = seconds[idx][2]
            sec.sent += 1
            task = asyncio.ensure_future(one(host, port, path, args.timeout, sec))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            nxt += rng.expovariate(rate)
        await asyncio.sleep(max(0, end - time.monotonic()))
    if tasks:
        await asyncio.wait(tasks, timeout=args.timeout + 1)
    for t, (i, rate, s) in enumerate(seconds):
        print(json.dumps({"t": t, "step": i, "rate": rate, "sent": s.sent, "ok": s.ok, "refused": s.refused,
                          "other": s.other, "timeouts": s.timeouts, "p50_ms": pct(s.lat, 50),
                          "p99_ms": pct(s.lat, 99)}))
    sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    sub = ap.add_subparsers(dest="mode", required=True)
    u = sub.add_parser("upstream")
    u.add_argument("port_file")
    u.add_argument("--workers", type=int, default=8)
    u.add_argument("--mean-ms", type=float, default=40)
    u.add_argument("--sigma", type=float, default=0.5)
    u.add_argument("--seed", type=int, default=1)
    g = sub.add_parser("load")
    g.add_argument("url")
    g.add_argument("--steps", required=True)
    g.add_argument("--timeout", type=float, default=1.0)
    g.add_argument("--at-step", action="append")
    g.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    if args.mode == "upstream":
        asyncio.run(run_upstream(args))
    else:
        asyncio.run(run_load(args))


if __name__ == "__main__":
    main()
