"""Submission: the command (submit), the checks a record passes (checks), the partition oracle
(oracle), the bundle (bundle), acceptance (accept), re-evaluation (reevaluation) and W&B
collection (wandb_collect)."""
