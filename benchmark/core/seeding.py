"""Derived random streams (docs/design.md §4.10): every draw comes from a stream named by (seed,
purpose, *path).

Client sampling, data order, augmentation and masking are then the same in a sequential loop, a Ray
worker or a SLURM array task, and a checkpoint needs no RNG state: round r's streams depend only on
(seed, r, client).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from enum import IntEnum

import numpy as np
import torch


class Stream(IntEnum):
    PARTITION = 1
    INIT = 2
    SAMPLING = 3
    CLIENT = 4
    SERVER = 5
    TASK = 6
    PUBLIC = 7


def seed_word(seed: int, stream: Stream, *path: int) -> int:
    """A 63-bit integer seed derived from (seed, stream, *path)."""
    state = np.random.SeedSequence([int(seed), int(stream), *map(int, path)]).generate_state(
        1, dtype=np.uint64
    )[0]
    return int(state) & 0x7FFF_FFFF_FFFF_FFFF


def np_rng(seed: int, stream: Stream, *path: int) -> np.random.Generator:
    return np.random.default_rng(np.random.SeedSequence([int(seed), int(stream), *map(int, path)]))


def torch_gen(
    seed: int, stream: Stream, *path: int, device: str | torch.device = "cpu"
) -> torch.Generator:
    return torch.Generator(device=device).manual_seed(seed_word(seed, stream, *path))


@contextmanager
def scoped_torch_seed(seed: int, stream: Stream, *path: int) -> Iterator[None]:
    """Seed the global torch RNG for code that can only use it (module init, dropout), restoring it
    afterwards."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed_word(seed, stream, *path))
        yield
