"""The declared mutants of scripts/mutation.py (issue 55): per target (one method, partitioner or
training-loop file) the tests that pin it and its mutants, each an exact snippet of the file (it
must occur exactly once; tests/test_mutants.py checks that every snippet still does) and what it
becomes. ``tests`` on a mutant narrows the run to the tests that pin that behaviour (fast); the
target's ``tests`` are the default. ``equivalent`` (with the reason) marks a mutant that changes no
behaviour: listed, not run, not counted.

A new method or partitioner adds its target here (docs/adding-a-method.md): the mutants a reviewer
would worry about (an operator flipped, an index misaligned, a default changed, a branch dropped),
then ``python scripts/mutation.py NAME --write-docs``.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Mutant:
    id: str
    what: str
    original: str
    mutant: str
    tests: tuple[str, ...] = ()
    equivalent: str | None = None


@dataclass(frozen=True)
class Target:
    file: str
    tests: tuple[str, ...]
    mutants: tuple[Mutant, ...]


FA = "tests/methods/test_featarc.py"
SH = "tests/benchmark/data/test_partitioner_behaviour.py"
OR = "tests/methods/test_orchestra.py"
DD = "tests/methods/test_documented_defaults.py"
PT = "tests/benchmark/data/test_partitioners.py"
FM = "tests/methods/test_fedmae.py"

TARGETS: dict[str, Target] = {
    "featarc": Target(
        "methods/featarc.py",
        (FA,),
        (
            Mutant(
                "sub-alignment",
                "the alignment term subtracted",
                "return loss + cfg.reg_scale * alignment_loss(",
                "return loss - cfg.reg_scale * alignment_loss(",
                (f"{FA}::test_step_loss_is_contrastive_plus_lambda_times_alignment",),
            ),
            Mutant(
                "no-detach",
                "the targets carry a gradient",
                "t = targets.detach()",
                "t = targets",
                (f"{FA}::test_alignment_targets_carry_no_gradient",),
            ),
            Mutant(
                "argmax-cluster",
                "the worst-aligned cluster picked",
                "best = scores.min()",
                "best = scores.max()",
                (f"{FA}::test_pick_cluster_breaks_exact_ties_to_the_smallest_index",),
            ),
            Mutant(
                "loss-halves",
                "L_align without the 1/2 weights",
                "return 0.5 * neg_cosine(p1, t).mean() + 0.5 * neg_cosine(p2, t).mean()",
                "return neg_cosine(p1, t).mean() + neg_cosine(p2, t).mean()",
                (
                    f"{FA}::test_alignment_loss_is_minus_one_at_identical_features_and_its_sign_"
                    "pulls_together",
                ),
            ),
            Mutant(
                "flip-targets",
                "each image aligned to another image's cluster feature",
                "alignment_loss(a1, a2, targets[idx])",
                "alignment_loss(a1, a2, targets[idx.flip(0)])",
                (f"{FA}::test_each_image_is_aligned_to_its_own_target",),
            ),
            Mutant(
                "unindexed-targets",
                "targets in data order, not the batch's rows",
                "alignment_loss(a1, a2, targets[idx])",
                "alignment_loss(a1, a2, targets[: idx.numel()])",
                (f"{FA}::test_each_image_is_aligned_to_its_own_target",),
            ),
        ),
    ),
    "shards": Target(
        "benchmark/data/partitioners/shards.py",
        (SH, "tests/benchmark/data/test_partitioner_scale.py"),
        (
            Mutant(
                "arange-order",
                "shards cut from the index order, not a label sort (IID shards)",
                'order = np.argsort(labels, kind="stable")',
                "order = np.arange(labels.size)",
                (f"{SH}::test_fedavg_shards_pathological",),
            ),
            Mutant(
                "with-replacement",
                "a shard drawn twice",
                "rs.choice(remaining, self.shards_per_client, replace=False)",
                "rs.choice(remaining, self.shards_per_client, replace=True)",
                (f"{SH}::test_fedavg_shards_pathological",),
            ),
            Mutant(
                "size-off-by-one",
                "shards one sample short",
                "size = labels.size // n_shards",
                "size = labels.size // n_shards - 1",
                (f"{SH}::test_fedavg_shards_pathological",),
            ),
        ),
    ),
    "dirichlet": Target(
        "benchmark/data/partitioners/dirichlet.py",
        (SH, PT),
        (
            Mutant(
                "cap-inclusive",
                "a client exactly at the N/K cap still draws (``<=`` for ``<``)",
                "p = p * (sizes < cap)",
                "p = p * (sizes <= cap)",
                (f"{SH}::test_labeldir_cap_excludes_a_client_exactly_at_n_over_k",),
            ),
            Mutant(
                "labeldir-min-size-exclusive",
                "a draw whose smallest client is exactly min_size rejected",
                "if not draw.degenerate and smallest >= self.min_size:",
                "if not draw.degenerate and smallest > self.min_size:",
                (f"{SH}::test_min_size_is_inclusive",),
            ),
            Mutant(
                "plain-min-size-inclusive",
                "dirichlet_plain raises for a client exactly at min_size",
                "if smallest < self.min_size:",
                "if smallest <= self.min_size:",
                (f"{SH}::test_min_size_is_inclusive",),
            ),
            Mutant(
                "cuts-rounded",
                "cut points rounded instead of truncated",
                "cuts = (np.cumsum(p) * n_c).astype(int)[:-1]",
                "cuts = np.round(np.cumsum(p) * n_c).astype(int)[:-1]",
                (f"{PT}::test_bit_faithful_labeldir_and_band",),
            ),
            Mutant(
                "remainder-to-smallest",
                "dirichlet_plain's leftovers to the smallest fractional parts",
                'order = np.argsort(-(exact - counts), kind="stable")',
                'order = np.argsort(exact - counts, kind="stable")',
                (f"{PT}::test_golden_digest",),
            ),
        ),
    ),
    "quantity": Target(
        "benchmark/data/partitioners/quantity.py",
        (SH, PT),
        (
            Mutant(
                "leftover-from-client-0",
                "quantity_weights' leftovers dealt from client 0, not client 1",
                "pieces[j % num_clients].append(perm[n - j : n - j + 1])",
                "pieces[(j - 1) % num_clients].append(perm[n - j : n - j + 1])",
                (f"{SH}::test_quantity_weights_leftovers_follow_easyfl",),
            ),
            Mutant(
                "leftover-forward",
                "quantity_weights' leftovers taken in permutation order, not from the end",
                "pieces[j % num_clients].append(perm[n - j : n - j + 1])",
                "pieces[j % num_clients].append(perm[n - leftover + j - 1 : n - leftover + j])",
                (f"{SH}::test_quantity_weights_leftovers_follow_easyfl",),
            ),
            Mutant(
                "dirichlet-cuts-rounded",
                "quantity_dirichlet's cut points rounded",
                "cuts = (np.cumsum(q) * n).astype(int)[:-1]",
                "cuts = np.round(np.cumsum(q) * n).astype(int)[:-1]",
                (f"{PT}::test_bit_faithful_quantity_and_homo",),
            ),
        ),
    ),
    "orchestra": Target(
        "methods/orchestra.py",
        (OR,),
        (
            Mutant(
                "init-ignores-small-client-policy",
                "the initialisation round drops a client smaller than B (no centroids)",
                "drop_last = local_drop_last(len(view), cfg.batch_size, True)",
                "drop_last = True",
                (f"{OR}::test_initialisation_round_follows_the_small_client_policy",),
            ),
            Mutant(
                "blur-0",
                "view A without its Gaussian blur",
                "    gray_p=0.2,\n    blur_p=0.5,",
                "    gray_p=0.2,\n    blur_p=0.0,",
                (f"{OR}::test_views_are_the_documented_augmentations",),
            ),
            Mutant(
                "blur-prime-swapped",
                "view A' with A's blur probability",
                "    gray_p=0.2,\n    blur_p=0.1,",
                "    gray_p=0.2,\n    blur_p=0.5,",
                (f"{OR}::test_views_are_the_documented_augmentations",),
            ),
            Mutant(
                "server-sk-10",
                "the server's Sinkhorn-Knopp at 10 iterations, not 100",
                "sk_iters_server: int = 100",
                "sk_iters_server: int = 10",
                (f"{DD}::test_defaults_are_the_documented_values_with_their_sources[orchestra]",),
            ),
            Mutant(
                "server-sk-iters-local",
                "the server clusters with the clients' Sinkhorn budget (10, not 100)",
                "sk_iters=cfg.sk_iters_server,",
                "sk_iters=cfg.sk_iters_local,",
                (f"{OR}::test_server_clustering_runs_with_the_server_settings",),
            ),
        ),
    ),
    "fedmae": Target(
        "methods/fedmae.py",
        ("tests/methods/test_fedmae.py",),
        (
            Mutant(
                "pool-5",
                "a block pool of 5, not 10",
                "pool_size: int = 10",
                "pool_size: int = 5",
                (f"{DD}::test_defaults_are_the_documented_values_with_their_sources[fedmae]",),
            ),
            Mutant(
                "pool-round-ascending",
                "the pool ordered oldest round first",
                "key=lambda e: (-e.round, e.client)",
                "key=lambda e: (e.round, e.client)",
                (f"{FM}::test_pool_order_replacement_and_size",),
            ),
            Mutant(
                "pool-keeps-stale",
                "a client's older upload kept beside its new one",
                "kept = [e for e in entries if e.client not in uploads]",
                "kept = list(entries)",
                (f"{FM}::test_pool_order_replacement_and_size",),
            ),
            Mutant(
                "keep-rounded",
                "the number of visible patches rounded instead of truncated",
                "return int(num_patches * (1 - mask_ratio))",
                "return round(num_patches * (1 - mask_ratio))",
                equivalent="L (1 - rho) is an integer for every shipped size (L = 16 in the "
                "shipped grids, 196 in the paper preset, at rho = 0.75): truncating and rounding "
                "agree",
            ),
            Mutant(
                "noise-descending",
                "masks from a descending argsort of the noise",
                "return torch.argsort(noise, dim=1).to(device, non_blocking=True)",
                "return torch.argsort(-noise, dim=1).to(device, non_blocking=True)",
                equivalent="the noise is i.i.d. uniform: sorting it descending draws the same "
                "distribution of masks (a per-seed difference, not a wrong implementation)",
            ),
            Mutant(
                "mean-sum",
                "the shared-tensor mean not divided by the count",
                "return (acc / len(tensors)).to(tensors[0].dtype)",
                "return acc.to(tensors[0].dtype)",
                (f"{FM}::test_cascade_mean_shared_tensors",),
            ),
        ),
    ),
    "fedu": Target(
        "methods/fedu.py",
        ("tests/methods/test_fedu.py",),
        (
            Mutant(
                "dapu-inclusive",
                "the global predictor also when D equals the threshold (D >= mu keeps the local)",
                "take_global = d < self.cfg.dapu_threshold",
                "take_global = d <= self.cfg.dapu_threshold",
                ("tests/methods/test_fedu.py::test_dapu_branches",),
            ),
            Mutant(
                "dapu-swapped",
                "the branches of DAPU swapped",
                "take_global = d < self.cfg.dapu_threshold",
                "take_global = d >= self.cfg.dapu_threshold",
                ("tests/methods/test_fedu.py::test_dapu_branches",),
            ),
            Mutant(
                "online-local",
                "the online encoder starts from the client's own, not the global one",
                "**select(glob, ONLINE),",
                "**select(state.tensors, ONLINE),",
                ("tests/methods/test_fedu.py::test_dapu_branches",),
            ),
        ),
    ),
    "fedema": Target(
        "methods/fedema.py",
        ("tests/methods/test_fedema.py",),
        (
            Mutant(
                "dapu-swapped",
                "predictor_update dapu keeps the local predictor below the threshold",
                "select(glob if d < cfg.dapu_threshold else local, PREDICTOR)",
                "select(local if d < cfg.dapu_threshold else glob, PREDICTOR)",
                ("tests/methods/test_fedema.py::test_predictor_update_dapu",),
            ),
            Mutant(
                "dapu-is-global",
                "predictor_update dapu always takes the global predictor",
                "select(glob if d < cfg.dapu_threshold else local, PREDICTOR)",
                "select(glob, PREDICTOR)",
                ("tests/methods/test_fedema.py::test_predictor_update_dapu",),
            ),
        ),
    ),
    "local_train": Target(
        "benchmark/toolkit/local_train.py",
        ("tests/benchmark/test_local_train.py",),
        (
            Mutant(
                "drop-at-exactly-b",
                "the partial batch dropped also when n = B",
                "return drop_last is not False and num_examples > batch_size",
                "return drop_last is not False and num_examples >= batch_size",
                equivalent="a client of exactly B images has no partial batch to drop",
            ),
            Mutant(
                "small-client-no-step",
                "a client smaller than a batch takes no step (the loaders' drop_last)",
                "return drop_last is not False and num_examples > batch_size",
                "return drop_last is not False",
                (
                    "tests/benchmark/test_local_train.py::"
                    "test_a_client_smaller_than_a_batch_trains_one_batch_in_every_method",
                ),
            ),
        ),
    ),
    "semi_supervised": Target(
        "tasks/finetuning/semi_supervised.py",
        ("tests/tasks/test_semi_supervised.py",),
        (
            Mutant(
                "no-cosine",
                "fine-tuning at a constant learning rate (scheduler never stepped)",
                "after_step=sched.step,",
                "after_step=None,",
                ("tests/tasks/test_semi_supervised.py::test_lr_follows_a_per_step_cosine_to_zero",),
            ),
            Mutant(
                "cosine-over-double",
                "the cosine spread over twice the steps (ends at half the lr)",
                "CosineAnnealingLR(opt, T_max=cfg.steps, eta_min=0.0)",
                "CosineAnnealingLR(opt, T_max=2 * cfg.steps, eta_min=0.0)",
                ("tests/tasks/test_semi_supervised.py::test_lr_follows_a_per_step_cosine_to_zero",),
            ),
        ),
    ),
    "loss_watch": Target(
        "tasks/divergence.py",
        ("tests/tasks/test_loss_watch.py",),
        (
            Mutant(
                "isnan",
                "an infinite loss not seen as divergence",
                "~torch.isfinite(last)",
                "torch.isnan(last)",
            ),
            Mutant(
                "last-bad",
                "the last, not the first, non-finite step reported",
                "new_bad = (self._first_bad == 0) & ~torch.isfinite(last)",
                "new_bad = ~torch.isfinite(last)",
            ),
            Mutant(
                "never-checks",
                "no check every ``every`` steps",
                "if self.every and self.steps % self.every == 0:",
                "if False:",
            ),
        ),
    ),
}
