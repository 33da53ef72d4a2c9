"""Probes: the encoder stays frozen and a classifier is read from its features (kNN, the linear
probe and its per-client and transfer variants, the papers' native probes)."""
