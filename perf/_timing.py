"""Timing under a shared, loaded machine: wall time and this process's CPU time, side by side.

On a machine shared with other jobs (load average well above the core count) wall time mostly
measures how often the scheduler lets us run; the process's CPU time (user + system, all threads)
measures the work done. With torch held to one intra-op thread (``perf/run.py --threads 1``,
the default) CPU time has no OpenMP spin-wait in it, so CPU time ratios are the figures to read
under load; wall ratios are printed next to them.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass


@dataclass
class Span:
    wall: float = 0.0
    cpu: float = 0.0


@contextmanager
def timed() -> Iterator[Span]:
    span = Span()
    w0, c0 = time.perf_counter(), time.process_time()
    try:
        yield span
    finally:
        span.wall = time.perf_counter() - w0
        span.cpu = time.process_time() - c0


def median_ratio(num: list[Span], den: list[Span], attr: str) -> float:
    """Median over paired repetitions of num/den (pairs ran back to back, so they saw the same
    load)."""
    return statistics.median(getattr(a, attr) / getattr(b, attr) for a, b in zip(num, den))


def med(spans: list[Span], attr: str) -> float:
    return statistics.median(getattr(s, attr) for s in spans)


def best_ratio(num: list[Span], den: list[Span], attr: str) -> float:
    """min(num)/min(den): each variant's least disturbed repetition (timeit's rule), robust to
    bursts of load."""
    return min(getattr(s, attr) for s in num) / min(getattr(s, attr) for s in den)
