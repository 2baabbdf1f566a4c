"""The server's Prometheus metrics: RPC latency and errors by method and code, RPCs in flight, kept as plain numbers
and turned into metric families when scraped."""
from __future__ import annotations

import itertools
import threading
import time

import grpc
import numpy as np
from prometheus_client import REGISTRY, CollectorRegistry
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, HistogramMetricFamily
from prometheus_client.utils import floatToGoString

_monotonic = time.monotonic  # (a module name for what every call runs: one lookup where time.monotonic is two)

_LATENCY_BUCKETS = (.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30)
_BUCKET_LABELS = [*map(floatToGoString, _LATENCY_BUCKETS), "+Inf"]  # "le" of each count, the last past every bound
_LATENCY_BOUNDS = list(_LATENCY_BUCKETS)  # (for numpy.searchsorted: x <= bound i counts in bucket i, as "le" says)


class RpcMetrics:
    """The server's RPC metrics (latency histogram and errors by method and code, RPCs in flight by method), kept
    as plain numbers per method and turned into Prometheus families when scraped: a Collector. prometheus_client's
    Histogram, Gauge and Counter cost about 2.2 µs per call here (a lock and a method call per value, a Python loop
    over the buckets), a third of the dispatcher's own cost (benchmarks/platform/RESULTS.md); this costs about 0.5.

    Numbers are kept per method and thread and summed when scraped: a server's calls all run on its event loop's
    thread, so each thread's numbers have one writer and need no lock (a process may run servers on several
    threads)."""

    def __init__(self, registry: CollectorRegistry):
        self._methods: dict[tuple[str, int], MethodMetrics] = {}
        registry.register(self)

    def of_method(self, method: str) -> MethodMetrics:
        """Once per method and server, on the server's thread (setdefault: atomic under the GIL)."""
        return self._methods.setdefault((method, threading.get_ident()), MethodMetrics())

    def describe(self):
        return [HistogramMetricFamily("praxon_grpc_server_handling_seconds", "RPC latency"),
                GaugeMetricFamily("praxon_grpc_server_in_flight", "RPCs in progress"),
                CounterMetricFamily("praxon_grpc_server_errors", "RPCs that ended with a non-OK code")]

    def collect(self):
        latency = HistogramMetricFamily("praxon_grpc_server_handling_seconds", "RPC latency",
                                        labels=["method", "code"])
        in_flight = GaugeMetricFamily("praxon_grpc_server_in_flight", "RPCs in progress", labels=["method"])
        errors = CounterMetricFamily("praxon_grpc_server_errors", "RPCs that ended with a non-OK code",
                                     labels=["method", "code"])
        flying: dict[str, int] = {}
        series: dict[tuple[str, str], tuple[list[int], float]] = {}
        for (method, _), m in list(self._methods.items()):  # summed over the threads
            flying[method] = flying.get(method, 0) + m.in_flight
            for code, latencies in list(m.codes.items()):
                counts, total, _ = _count(latencies)
                summed, summed_total = series.get((method, code)) or ([0] * len(counts), 0.0)
                series[method, code] = [a + b for a, b in zip(summed, counts, strict=True)], summed_total + total
        for method, n in flying.items():
            in_flight.add_metric([method], n)
        for (method, code), (counts, total) in series.items():
            cumulative = list(itertools.accumulate(counts))
            latency.add_metric([method, code], list(zip(_BUCKET_LABELS, cumulative, strict=True)), total)
            if code != "OK":
                errors.add_metric([method, code], cumulative[-1])
        return [latency, in_flight, errors]


_METRICS: dict[CollectorRegistry, RpcMetrics] = {}  # one collector per registry


def metrics_of(registry: CollectorRegistry = REGISTRY) -> RpcMetrics:
    if registry not in _METRICS:
        _METRICS[registry] = RpcMetrics(registry)
    return _METRICS[registry]


_COUNT_EVERY = 1024  # latencies a method keeps per code before it counts them into its buckets


class MethodMetrics:
    """One method's numbers on one thread: RPCs in flight, and per status code (the count in each latency bucket,
    the last one past every bound; the latencies' sum; the latest latencies, not yet counted).

    A call appends its latency, and every _COUNT_EVERY calls they are counted into the buckets at once (numpy):
    a bucket search and three updates per call cost about 1.5k instructions, 0.3% of a trivial call. The counted
    state is replaced, never changed, so a scrape on another thread reads one consistent state: counts and sum,
    plus the latencies appended since (_count), whatever the writer is doing."""

    def __init__(self):
        self.in_flight = 0
        self.codes: dict[str, tuple[list[int], float, list[float]]] = {}

    def start(self) -> float:
        """The call's start on time.monotonic() (the clock the dispatcher's other checks share)."""
        self.in_flight += 1
        return _monotonic()

    def done(self, start: float, context) -> None:
        seconds = _monotonic() - start
        code = context.code()
        name = "OK" if not code else code.name if isinstance(code, grpc.StatusCode) else str(code)  # None or 0: OK
        self.in_flight -= 1
        latencies = self.codes.get(name)
        if latencies is None:
            latencies = self.codes[name] = ([0] * (len(_LATENCY_BUCKETS) + 1), 0.0, [])
        latencies[2].append(seconds)
        if len(latencies[2]) >= _COUNT_EVERY:
            self.codes[name] = _count(latencies)


def _count(latencies: tuple[list[int], float, list[float]]) -> tuple[list[int], float, list[float]]:
    """(counts, sum, pending latencies) with the pending ones counted: a new state, the old one unchanged."""
    counts, total, pending = latencies
    pending = list(pending)  # (a snapshot: the writer may append meanwhile)
    added = np.bincount(np.searchsorted(_LATENCY_BOUNDS, pending, side="left"), minlength=len(counts))
    return [a + int(b) for a, b in zip(counts, added, strict=True)], total + sum(pending), []


