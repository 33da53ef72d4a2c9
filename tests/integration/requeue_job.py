"""A submitit job class for the requeue test, in an importable module (not a test file) so that the
job process can unpickle it by reference."""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Mapping

from benchmark.launchers.submitit import CellJob


class TimesOutAfterRoundOne(CellJob):
    """On its first attempt, the job 'runs out of time' right after round 1's checkpoint: it raises
    the signal SLURM (and submitit's local controller) sends before the time limit, SIGUSR2, at
    itself. With a time limit of at most 10 minutes submitit's handler classifies the signal as a
    timeout, calls ``checkpoint()`` and requeues."""

    def on_round(self, round_: int, metrics: Mapping[str, float]) -> None:
        super().on_round(round_, metrics)
        if self.attempt == 0 and round_ == 1:
            os.kill(os.getpid(), signal.SIGUSR2)
            time.sleep(60)  # the handler interrupts this sleep and exits for requeue
