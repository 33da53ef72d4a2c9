"""Contracts: the value types methods, tasks and the engine exchange, the Method contract, the
specs a grid is made of, and the registries (plugin points) components register in."""
