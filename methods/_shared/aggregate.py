"""Server-side aggregation maths: the harness's own functions (``benchmark.toolkit.aggregate``),
offered to every method through ``benchmark.api``; kept here so the built-in methods' imports read
as before."""

from benchmark.api import (
    FedAvgFold,
    RunningAverage,
    aggregation_weights,
    average_uploads,
    weighted_average,
)

__all__ = [
    "FedAvgFold",
    "RunningAverage",
    "aggregation_weights",
    "average_uploads",
    "weighted_average",
]
