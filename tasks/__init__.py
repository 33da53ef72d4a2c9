"""Downstream tasks, grouped by kind: ``tasks.probes`` (kNN, linear probes, the papers' native
probes, per-client, transfer), ``tasks.finetuning`` (fine-tuning, semi-supervised, the method's own
classifier), ``tasks.reconstruction`` and ``tasks.coco_detection``; ``tasks.registration``
registers every one of them, and ``tasks.cards`` holds the protocol cards.

Importing this package registers every built-in task (``tasks.registration``, torch-free; each
task's module is imported on first use), as importing ``methods`` registers every method: the
entry ``tasks`` of the entry-point group ``fssl_bench.builtins`` names this package.
``tasks.registration`` and ``tasks.cards`` stay torch-free.
"""

from tasks import registration  # noqa: F401  (imported for registration)
