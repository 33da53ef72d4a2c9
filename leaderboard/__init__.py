"""The static leaderboard: track definitions (data), seed statistics and ranks (pandas), rendering
(jinja2).

Torch-free and offline: it reads result records (``benchmark.records``) and writes plain static
files.
"""
