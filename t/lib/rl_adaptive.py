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
      answers; GET /status/N answers status N at once.  GET /ms/N[/...] is
      served as anything else, for a mean of N ms instead (an endpoint
      of its own).  Anything else is served: "ok".

  rl_adaptive.py load URL --steps RATE:SECONDS[,RATE:SECONDS...]
      [--timeout 1] [--at-step N:URL ...] [--mix PATH:SHARE ...]
      [--clients PATH:N[:PAUSE_MS] ...]
      Open-loop: requests start at exponential gaps of mean 1/RATE whatever
      the answers, each on its own connection, abandoned after --timeout
      seconds; --mix sends a SHARE of them to PATH (of URL's server)
      instead.  --clients adds N closed-loop clients of PATH for the whole
      run: each sends its next request once the last is answered (PAUSE_MS
      later, default 0), or 20 ms after a refusal.  Prints one JSON line a
      second: {"t":..., "step":..., "rate":..., "sent":..., "ok":... (2xx
      within the timeout), "refused": ... (429 or 503), "other":...,
      "timeouts":..., "p50_ms":..., "p99_ms":... (of the 2xx), "paths":
      {PATH: {"ok":..., "refused":..., "other":..., "p99_ms":...}, ...}};
      --at-step
      N:URL fetches URL when step N starts.
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

    def service_s(self, mean_ms):
        mu = math.log(mean_ms) - self.sigma * self.sigma / 2
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
                status = 200
                if path.startswith("/set?mean="):
                    self.mean_ms = float(path.split("=", 1)[1])
                    body = b"set"
                elif path == "/close":
                    break
                elif path == "/hang":
                    await asyncio.sleep(3600)
                    break
                elif path.startswith("/status/"):
                    status = int(path.split("/")[2])
                    body = b"status"
                else:
                    mean = float(path.split("/")[2]) if path.startswith("/ms/") else self.mean_ms
                    async with self.sem:  # FIFO: waiters in arrival order
                        await asyncio.sleep(self.service_s(mean))
                    self.served += 1
                    body = b"ok"
                writer.write(b"HTTP/1.1 %d %s\r\nContent-Length: %d\r\nContent-Type: text/plain\r\n\r\n%s"
                             % (status, b"OK" if status == 200 else b"Status", len(body), body))
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
        self.paths = {}

    def count(self, path, what):
        setattr(self, what, getattr(self, what) + 1)
        p = self.paths.setdefault(path, {"ok": 0, "refused": 0, "other": 0})
        p[what if what in p else "other"] += 1


async def one(host, port, path, timeout, sec):
    """One request; its status (0: no answer)."""
    start = time.monotonic()
    writer = None
    status = 0
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
            sec.count(path, "ok")
            sec.lat.append(ms)
            sec.paths[path].setdefault("lat", []).append(ms)
        elif status in (429, 503):
            sec.count(path, "refused")
        else:
            sec.count(path, "other")
    except asyncio.TimeoutError:
        sec.count(path, "timeouts")
    except (ConnectionError, OSError, ValueError, IndexError):
        sec.count(path, "other")
    finally:
        if writer is not None:
            writer.close()
    return status


async def client(host, port, path, timeout, pause_s, second_at, until):
    """A closed-loop client of path until the clock reaches until."""
    while time.monotonic() < until:
        sec = second_at(time.monotonic())
        if sec is None:
            return
        sec.sent += 1
        status = await one(host, port, path, timeout, sec)
        await asyncio.sleep(0.02 if status in (429, 503) else pause_s)


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
    mix = []
    for m in args.mix or []:
        p, share = m.rsplit(":", 1)
        mix.append((p, float(share)))
    rng = random.Random(args.seed)
    seconds = []  # (step, rate, Second)
    tasks = set()
    t0 = time.monotonic()
    step_start = t0
    total = sum(d for _, d in steps)
    n_total = sum(int(round(d)) for _, d in steps)
    all_seconds = [Second() for _ in range(n_total)]

    def second_at(t):
        """The Second a request started at monotonic t counts in (None: past the run)."""
        k = int(t - t0)
        return all_seconds[k] if 0 <= k < n_total else None

    for c in args.clients or []:
        f = c.split(":")
        pause = float(f[2]) / 1000 if len(f) > 2 else 0.0
        for _ in range(int(f[1])):
            task = asyncio.ensure_future(client(host, port, f[0], args.timeout, pause, second_at, t0 + total))
            tasks.add(task)
            task.add_done_callback(tasks.discard)

    def pick():
        u = rng.random()
        for p, share in mix:
            if u < share:
                return p
            u -= share
        return path

    for i, (rate, dur) in enumerate(steps):
        if i in at_step:
            await fetch(at_step[i])
        step_start = time.monotonic()
        n_sec = int(round(dur))
        for k in range(n_sec):
            seconds.append((i, rate, all_seconds[len(seconds)]))
        end = step_start + dur
        nxt = step_start + rng.expovariate(rate) if rate > 0 else end
        while True:
            now = time.monotonic()
            if nxt >= end:
                break
            if nxt > now:
                await asyncio.sleep(nxt - now)
            idx = len(seconds) - n_sec + min(n_sec - 1, int(nxt - step_start))
            sec = seconds[idx][2]
            sec.sent += 1
            task = asyncio.ensure_future(one(host, port, pick(), args.timeout, sec))
            tasks.add(task)
            task.add_done_callback(tasks.discard)
            nxt += rng.expovariate(rate)
        await asyncio.sleep(max(0, end - time.monotonic()))
    if tasks:
        await asyncio.wait(tasks, timeout=args.timeout + 1)
    for t, (i, rate, s) in enumerate(seconds):
        for p in s.paths.values():
            p["p99_ms"] = pct(p.pop("lat", []), 99)
        print(json.dumps({"t": t, "step": i, "rate": rate, "sent": s.sent, "ok": s.ok, "refused": s.refused,
                          "other": s.other, "timeouts": s.timeouts, "p50_ms": pct(s.lat, 50),
                          "p99_ms": pct(s.lat, 99), "paths": s.paths}))
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
    g.add_argument("--mix", action="append")
    g.add_argument("--clients", action="append")
    g.add_argument("--seed", type=int, default=2)
    args = ap.parse_args()
    if args.mode == "upstream":
        asyncio.run(run_upstream(args))
    else:
        asyncio.run(run_load(args))


if __name__ == "__main__":
    main()
