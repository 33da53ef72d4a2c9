"""The ``Method`` protocol and ``MethodBase`` (the declared capabilities with their defaults).

They are defined by the harness (``benchmark/method.py``), which is typed against them and must not
import this package; this module re-exports them for in-tree methods. Out-of-tree methods import
them from ``benchmark.api``. A method subclasses ``MethodBase`` once and never a concrete method:
shared code lives in ``methods/_shared``.
"""

from benchmark.api import Federation, InputSpec, Method, MethodBase

__all__ = ["Federation", "InputSpec", "Method", "MethodBase"]
