"""fssl-bench: a reproducible benchmark for federated self-supervised learning."""

__version__ = "0.2.0"
