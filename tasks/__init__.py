"""Downstream tasks, one module each (``tasks.builtin`` imports them all so that each registers
itself).

Importing this package imports nothing else: ``tasks.data_needs`` and ``tasks.cards`` stay
torch-free.
"""
