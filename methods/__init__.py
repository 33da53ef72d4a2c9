"""FSSL methods. Importing this package registers every built-in method (one module per method)."""

from methods import baselines, fedavg_simclr  # noqa: F401
