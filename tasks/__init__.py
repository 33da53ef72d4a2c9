"""Downstream tasks, grouped by kind: ``tasks.probes`` (kNN, linear probes, the papers' native
probes, per-client, transfer), ``tasks.finetuning`` (fine-tuning, semi-supervised, the method's own
classifier), ``tasks.reconstruction`` and ``tasks.coco_detection``; ``tasks.registration``
registers every one of them, and ``tasks.cards`` holds the protocol cards.

Importing this package imports nothing else: ``tasks.registration`` and ``tasks.cards`` stay
torch-free.
"""
