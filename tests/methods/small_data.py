"""A smaller digits train split for the tests whose property does not depend on how much a client
trains (resume equals straight, the same cell twice, which kernels or hooks a step calls, a byte
count): ``test_fraction`` 0.8 keeps 359 of the 1,797 images for training (every class, each client
of a 2- to 6-client cell still takes several steps of 16) and scores on the other 1,438, so a cell
trains on a quarter of the default's 1,437 images, about 4x less work (not a test module itself).

The images, the classes and every code path are the default's; only the train split is smaller.
A test whose property is a trend over training (μ falling with the lr, a probe that learns) says
so where it uses it.
"""

from __future__ import annotations

from typing import Any

SMALL_DIGITS: dict[str, Any] = {"name": "digits", "test_fraction": 0.8}

__all__ = ["SMALL_DIGITS"]
