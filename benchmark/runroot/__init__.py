"""A run root on disk: the run directory of a cell and of a shared pre-training (rundir), the claim
and pre-training locks (locks), the status of a run (status). Torch-free."""
