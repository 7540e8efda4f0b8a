"""A floor for M/M/1 in pure Python (docs/fast.md "Speed": what the issue's 0.5 × pyserq asks).

Not the simulator: a hand-written loop doing the least work serq_fast's report needs per
request, with nothing general in it: two heap events (arrival, departure), the arrival's gap and
the session's service drawn from stream-v2-style SplitMix64 streams (one opened per session) and
rounded to 12 significant digits, three statistics (Welford mean and variance, the exact samples
kept), and three time averages (the queue gauge, the stage's number and utilisation). What it
costs per request is about the least any pure-Python engine of this design can cost; pyserq's
M/M/1 costs ≈ 1.1 µs of CPU per request (two events at ≈ 1.8 M events per CPU-second,
bench_fast.py).

    python3 benchmarks/floor_mm1.py [--horizon 40000] [--repeat 5]
"""

from __future__ import annotations

import argparse
import heapq
import math
import time

MASK = (1 << 64) - 1
GAMMA = 0x9E3779B97F4A7C15
MIX1 = 0xBF58476D1CE4E5B9
MIX2 = 0x94D049BB133111EB
UNIT = 2.0 ** -53


def mix(z: int) -> int:
    z = ((z ^ (z >> 30)) * MIX1) & MASK
    z = ((z ^ (z >> 27)) * MIX2) & MASK
    return z ^ (z >> 31)


class Stream:
    __slots__ = ("state",)

    def __init__(self, key: int) -> None:
        self.state = key

    def random(self) -> float:
        z = self.state = (self.state + GAMMA) & MASK
        z = ((z ^ (z >> 30)) * MIX1) & MASK
        z = ((z ^ (z >> 27)) * MIX2) & MASK
        return ((z ^ (z >> 31)) >> 11) * UNIT


def round12(x: float) -> float:
    return float(format(x, ".12g"))


class Stat:
    __slots__ = ("n", "mean", "m2", "xs")

    def __init__(self) -> None:
        self.n = 0
        self.mean = 0.0
        self.m2 = 0.0
        self.xs: list = []

    def add(self, x: float) -> None:
        self.n += 1
        d = x - self.mean
        self.mean += d / self.n
        self.m2 += d * (x - self.mean)
        self.xs.append(x)


class TimeAverage:
    __slots__ = ("area", "t", "v")

    def __init__(self) -> None:
        self.area = 0.0
        self.t = 0.0
        self.v = 0.0

    def set(self, now: float, v: float) -> None:
        if v != self.v:
            self.area += self.v * (now - self.t)
            self.t = now
            self.v = v


def run(horizon: float, mean_gap: float = 1.25, mean_service: float = 1.0) -> int:
    arrivals = Stream(mix(1))
    heap: list = [(0.0, 0, 0, None)]
    seq = 1
    waiting: list = []
    head = 0
    busy = None
    sojourn, wait, response = Stat(), Stat(), Stat()
    gauge, number, util = TimeAverage(), TimeAverage(), TimeAverage()
    serial = 0
    while heap:
        now, _, kind, job = heapq.heappop(heap)
        if now > horizon:
            break
        if kind == 0:  # an arrival: the next one, a session with its own stream, its service
            heapq.heappush(heap, (now + round12(-mean_gap * math.log1p(-arrivals.random())), seq, 0, None))
            seq += 1
            need = round12(-mean_service * math.log1p(-Stream(mix(mix(7 ^ serial))).random()))
            serial += 1
            job = (now, need)
            if busy is None:
                busy = job
                heapq.heappush(heap, (now + need, seq, 1, job))
                seq += 1
            else:
                waiting.append(job)
        else:  # a departure: three statistics, the next job starts
            t_in, need = job
            s = now - t_in
            sojourn.add(s)
            wait.add(s - need)
            response.add(s)
            busy = None
            if head < len(waiting):
                busy = waiting[head]
                head += 1
                heapq.heappush(heap, (now + busy[1], seq, 1, busy))
                seq += 1
        n = len(waiting) - head + (busy is not None)
        gauge.set(now, n)
        number.set(now, n)
        util.set(now, 1.0 if n else 0.0)
    return response.n


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--horizon", type=float, default=40000.0)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    cpu = []
    for _ in range(args.repeat):
        t = time.process_time()
        n = run(args.horizon)
        cpu.append(time.process_time() - t)
    print(f"floor M/M/1 (horizon {args.horizon:g} s): {n} requests, CPU s {', '.join(f'{c:.3f}' for c in cpu)}; "
          f"best {1e6 * min(cpu) / n:.2f} µs per request")


if __name__ == "__main__":
    main()
