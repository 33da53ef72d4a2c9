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
FL = "tests/methods/test_flesd.py"
FD = "tests/methods/test_flesd_distill.py"
FS = "tests/methods/test_fedavg_simclr.py"
NB = "tests/methods/test_no_pretrain_bn.py"
PX = "tests/methods/test_pixels.py"
BL = "tests/methods/test_baselines.py"
IP = "tests/benchmark/data/test_iid_prefix.py"
TF = "tests/methods/test_two_forward_passes.py"

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
                "return to_device(torch.argsort(noise, dim=1), device)",
                "return to_device(torch.argsort(-noise, dim=1), device)",
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
        "benchmark/building_blocks/local_train.py",
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
    "flesd": Target(
        "methods/flesd.py",
        (FD, FL),
        (
            Mutant(
                "similarity-wrong-axis",
                "representations normalised over the batch (dim 0), not per row",
                "r = F.normalize(reps.float(), dim=1)",
                "r = F.normalize(reps.float(), dim=0)",
                (f"{FD}::test_similarity_matrix",),
            ),
            Mutant(
                "teacher-tau-multiplied",
                "the ensemble sharpened by exp((M - 1) * tau_T), not / tau_T",
                "acc = acc + pmath.exp((m - 1.0) / tau_teacher)",
                "acc = acc + pmath.exp((m - 1.0) * tau_teacher)",
                (f"{FD}::test_ensemble_is_mean_of_sharpened",),
            ),
            Mutant(
                "ensemble-sum",
                "the ensemble summed over clients, not averaged",
                "return acc / len(sims)",
                "return acc",
                (f"{FD}::test_ensemble_is_mean_of_sharpened",),
            ),
            Mutant(
                "targets-wrong-axis",
                "distillation targets normalised over the queries (dim 0), not over the anchors",
                "return sub / sub.sum(dim=1, keepdim=True)",
                "return sub / sub.sum(dim=0, keepdim=True)",
                (f"{FD}::test_targets_normalised_and_scale_invariant",),
            ),
            Mutant(
                "student-tau-multiplied",
                "the student's softmax at q.k * tau_S, not / tau_S",
                "log_q = F.log_softmax(queries.float() @ keys.float().t() / tau_student, dim=1)",
                "log_q = F.log_softmax(queries.float() @ keys.float().t() * tau_student, dim=1)",
                (f"{FD}::test_distill_loss_minimal_at_targets",),
            ),
            Mutant(
                "student-softmax-wrong-axis",
                "the student's softmax over the queries (dim 0), not over the anchors",
                "log_q = F.log_softmax(queries.float() @ keys.float().t() / tau_student, dim=1)",
                "log_q = F.log_softmax(queries.float() @ keys.float().t() / tau_student, dim=0)",
                (f"{FD}::test_distill_loss_minimal_at_targets",),
            ),
            Mutant(
                "momentum-after-keys",
                "the keys computed by the momentum encoder before its update",
                "        momentum_update_(momentum, student, zeta)\n"
                "        ks = F.normalize(momentum(v2).float(), dim=1)",
                "        ks = F.normalize(momentum(v2).float(), dim=1)\n"
                "        momentum_update_(momentum, student, zeta)",
                (f"{FL}::test_momentum_update_before_keys",),
            ),
            Mutant(
                "queue-not-fifo",
                "the anchor queue overwrites its first slots every batch",
                "self.ptr = (self.ptr + b) % m",
                "self.ptr = 0",
                (f"{FL}::test_distillation_zero_at_optimum_and_queue",),
            ),
            Mutant(
                "topk-self-included",
                "the top-k payload keeps the diagonal (self) among the k entries",
                '    s.fill_diagonal_(-float("inf"))\n    values, indices',
                "    values, indices",
                (f"{FD}::test_topk_sparsification",),
            ),
            Mutant(
                "topk-ties-dropped",
                "entries tied with the k-th largest dropped",
                "keep = off >= thresh",
                "keep = off > thresh",
                (f"{FD}::test_topk_floor_count_and_exact_ties",),
            ),
            Mutant(
                "topk-count-plus-one",
                "k' = floor(n N / 100) + 1 (the self entry counted as an other)",
                "return int(percent * n // 100)",
                "return int(percent * n // 100) + 1",
                (f"{FD}::test_topk_floor_count_and_exact_ties",),
            ),
            Mutant(
                "returns-momentum",
                "ESD returns the momentum encoder, not the student",
                "return tensors_of(student), {",
                "return tensors_of(momentum), {",
                (f"{FL}::test_warm_start_and_student_returned",),
            ),
            Mutant(
                "skip-fill-off-by-one",
                "one batch more than m/B' skipped while the queue fills",
                "skip = b < fill and",
                "skip = b <= fill and",
                (f"{FL}::test_warm_start_and_student_returned",),
            ),
            Mutant(
                "local-tau-student",
                "the local SimCLR step at the student's temperature, not tau",
                "return contrastive(net(v1), net(v2), cfg.local_tau)",
                "return contrastive(net(v1), net(v2), cfg.tau_student)",
                (f"{FL}::test_local_step_uses_local_tau",),
            ),
            Mutant(
                "local-one-forward-2b",
                "the local step's one forward pass over the 2B views (BN statistics over 2B images)",
                "return contrastive(net(v1), net(v2), cfg.local_tau)",
                "return contrastive(*net(torch.cat([v1, v2])).chunk(2), cfg.local_tau)",
                (f"{TF}::test_each_local_step_batchnorm_sees_one_view_size[flesd]",),
            ),
            Mutant(
                "local-same-view-twice",
                "the local loss of view 1 against itself",
                "return contrastive(net(v1), net(v2), cfg.local_tau)",
                "return contrastive(net(v1), net(v1), cfg.local_tau)",
                (
                    f"{TF}::test_the_step_loss_pairs_the_two_views_of_each_image[flesd-methods.flesd]",
                ),
            ),
            Mutant(
                "infer-train-mode",
                "D_pub embeddings inferred in train mode (batch BN statistics)",
                "        net.eval()\n        view = public.to(device)",
                "        view = public.to(device)",
                (f"{FL}::test_infer_runs_the_network_in_eval_mode",),
            ),
            Mutant(
                "tau-teacher-default",
                "tau_T = 0.2, not the paper's 0.1",
                "tau_teacher: float = 0.1",
                "tau_teacher: float = 0.2",
                (f"{DD}::test_defaults_are_the_documented_values_with_their_sources[flesd]",),
            ),
        ),
    ),
    "fedavg_simclr": Target(
        "methods/_shared/simclr.py",
        (FS,),
        (
            Mutant(
                "bn-local-ignores-client",
                "bn: local starts from the server's BN tensors, not the client's own",
                'tensors.update({k: v for k, v in state.tensors.items() if not k.startswith("opt.")})',
                "tensors.update({})",
                (f"{FS}::test_bn_local_keeps_client_bn",),
            ),
            Mutant(
                "bn-local-broadcasts-bn",
                "bn: local still broadcasts the server's BN tensors",
                "return Payload(without(server.model, self.bn_names()))",
                "return Payload(dict(server.model))",
                (f"{FS}::test_bn_local_keeps_client_bn",),
            ),
            Mutant(
                "decssl-names-literal",
                "the Dec-SSL name rule read on our names (the stem's bn1 kept local)",
                '("bn" in _decssl_name(k) or "running" in k)',
                '("bn" in k or "running" in k)',
                (f"{FS}::test_bn_filter_decssl_names_keeps_what_the_dec_ssl_imagenet_code_keeps",),
            ),
            Mutant(
                "keep-no-restore",
                "optimizer_state: keep starts a fresh optimizer every round",
                "        restore_optimizer(opt, state.tensors, ctx.device)\n",
                "        pass\n",
                (f"{FS}::test_optimizer_state_at_each_rounds_first_step",),
            ),
            Mutant(
                "keep-stale-lr",
                "optimizer_state: keep restores the previous round's learning rate",
                '        for group in opt.param_groups:\n            group["lr"] = lr',
                "        for group in opt.param_groups:\n            pass",
                equivalent="restore_optimizer loads only the per-parameter state into the new "
                "optimizer's own state_dict, whose param_groups already hold this round's lr: the "
                "reassignment is a no-op (a guard should restore_optimizer ever load param_groups)",
            ),
            Mutant(
                "batches-weight-ignored",
                "weighting: num_batches uploads the example count as its weight",
                'weight = stats.batches if cfg.weighting == "num_batches" else data.num_examples',
                "weight = data.num_examples",
                (
                    f"{FA}::test_cluster_mass_counts_examples_under_num_batches",
                    f"{FS}::test_num_batches_weighting_uploads_the_batch_count_as_the_weight",
                ),
            ),
            Mutant(
                "tau-default",
                "tau = 0.2, not Dec-SSL's 0.5",
                "tau: float = 0.5",
                "tau: float = 0.2",
                (
                    f"{DD}::test_defaults_are_the_documented_values_with_their_sources[fedavg_simclr]",
                ),
            ),
            Mutant(
                "orchestra-projector-affine",
                "the orchestra projector's last BN with affine parameters",
                "bn_last_affine=False,",
                "bn_last_affine=True,",
                (f"{FS}::test_projector_presets_have_the_papers_shapes",),
            ),
            Mutant(
                "encoder-train-mode",
                "the exported encoder left in train mode",
                "return net.encoder.eval()",
                "return net.encoder",
                equivalent="every consumer of an Encoder sets the mode it needs: the feature tasks call ``module.eval()`` (benchmark/building_blocks/features.py), the fine-tuning and probe engines theirs (tasks/finetuning/classifier.py, tasks/probes/native_engine.py)",
            ),
        ),
    ),
    "ntxent": Target(
        "benchmark/building_blocks/heads.py",
        (FS,),
        (
            Mutant(
                "tau-multiplied",
                "NT-Xent logits s * tau, not s / tau",
                "logits = u @ u.t() / tau",
                "logits = u @ u.t() * tau",
                (f"{FS}::test_ntxent_equals_pytorch_metric_learning",),
            ),
            Mutant(
                "no-self-mask",
                "the self-similarity left among the negatives",
                "logits = logits.masked_fill(torch.eye(2 * b, dtype=torch.bool, device=u.device), "
                'float("-inf"))',
                "logits = logits",
                (f"{FS}::test_ntxent_equals_pytorch_metric_learning",),
            ),
            Mutant(
                "wrong-positive",
                "the positive of view a taken as the next image, not its other view",
                "targets = torch.arange(2 * b, device=u.device).roll(b)",
                "targets = torch.arange(2 * b, device=u.device).roll(1)",
                (f"{FS}::test_ntxent_equals_pytorch_metric_learning",),
            ),
            Mutant(
                "normalise-wrong-axis",
                "embeddings normalised over the batch (dim 0), not per row",
                "u = F.normalize(torch.cat([z1, z2]).float(), dim=1)",
                "u = F.normalize(torch.cat([z1, z2]).float(), dim=0)",
                (f"{FS}::test_ntxent_equals_pytorch_metric_learning",),
            ),
        ),
    ),
    "crossview": Target(
        "methods/_shared/losses.py",
        (FS,),
        (
            Mutant(
                "tau-multiplied",
                "the cross-view logits u1 u2^T * tau, not / tau",
                "logits = u1 @ u2.t() / tau",
                "logits = u1 @ u2.t() * tau",
                (f"{FS}::test_crossview_is_ce_with_diagonal_targets_and_grads_flow",),
            ),
            Mutant(
                "targets-reversed",
                "the cross-view targets reversed (row i paired with image B-1-i)",
                "return F.cross_entropy(logits, torch.arange(z1.shape[0], device=z1.device))",
                "return F.cross_entropy(logits, torch.arange(z1.shape[0], device=z1.device).flip(0))",
                (f"{FS}::test_crossview_is_ce_with_diagonal_targets_and_grads_flow",),
            ),
        ),
    ),
    # FedAvg-SimCLR's client step, in its own file (issue 58; the family's loop is
    # "fedavg_simclr" above)
    "fedavg_simclr_step": Target(
        "methods/fedavg_simclr.py",
        (TF,),
        (
            Mutant(
                "one-forward-2b",
                "one forward pass over the 2B views (BN statistics over 2B images)",
                "return contrastive(net(v1), net(v2), cfg.tau)",
                "return contrastive(*net(torch.cat([v1, v2])).chunk(2), cfg.tau)",
                (f"{TF}::test_each_local_step_batchnorm_sees_one_view_size[fedavg_simclr]",),
            ),
            Mutant(
                "same-view-twice",
                "the loss of view 1 against itself",
                "return contrastive(net(v1), net(v2), cfg.tau)",
                "return contrastive(net(v1), net(v1), cfg.tau)",
                (
                    f"{TF}::test_the_step_loss_pairs_the_two_views_of_each_image"
                    "[fedavg_simclr-methods.fedavg_simclr]",
                ),
            ),
        ),
    ),
    "baselines": Target(
        "methods/baselines.py",
        (BL, FS),
        (
            Mutant(
                "local-ssl-drops-model",
                "local_ssl's client keeps only its optimizer state, not its model",
                "keep = {**new_state.tensors, **up.tensors}",
                "keep = dict(new_state.tensors)",
                (f"{BL}::test_local_ssl_client_resumes_from_its_own_model",),
            ),
            Mutant(
                "simclr-one-forward-2b",
                "central_ssl's and local_ssl's one forward pass over the 2B views",
                "return contrastive(net(v1), net(v2), cfg.tau)",
                "return contrastive(*net(torch.cat([v1, v2])).chunk(2), cfg.tau)",
                (
                    f"{TF}::test_each_local_step_batchnorm_sees_one_view_size[central_ssl]",
                    f"{TF}::test_each_local_step_batchnorm_sees_one_view_size[local_ssl]",
                ),
            ),
            Mutant(
                "simclr-same-view-twice",
                "central_ssl's and local_ssl's loss of view 1 against itself",
                "return contrastive(net(v1), net(v2), cfg.tau)",
                "return contrastive(net(v1), net(v1), cfg.tau)",
                (
                    f"{TF}::test_the_step_loss_pairs_the_two_views_of_each_image"
                    "[central_ssl-methods.baselines]",
                    f"{TF}::test_the_step_loss_pairs_the_two_views_of_each_image"
                    "[local_ssl-methods.baselines]",
                ),
            ),
            Mutant(
                "central-ssl-reset",
                "central_ssl resets its optimizer every round",
                'optimizer_state: Literal["reset", "keep"] = "keep"',
                'optimizer_state: Literal["reset", "keep"] = "reset"',
                (f"{BL}::test_central_ssl_keeps_one_optimizer_for_the_whole_run",),
            ),
            Mutant(
                "dec-sl-labels-misaligned",
                "dec_sl's cross-entropy against the first labels of the split, not the batch's",
                "return F.cross_entropy(net(x), labels[idx])",
                "return F.cross_entropy(net(x), labels[: idx.numel()])",
                (f"{BL}::test_dec_sl_pairs_each_image_with_its_own_label",),
            ),
            Mutant(
                "dec-sl-uniform",
                "dec_sl averages uniformly whatever weighting says",
                "    def fedavg_weighting(self) -> str:\n        return self.cfg.weighting",
                '    def fedavg_weighting(self) -> str:\n        return "uniform"',
                (f"{BL}::test_dec_sl_averages_by_client_size_or_uniformly",),
            ),
            Mutant(
                "dec-sl-crop-flip-jitters",
                "dec_sl's crop_flip augmentation still colour-jitters",
                "AugmentConfig(jitter_p=0.0, gray_p=0.0)",
                "AugmentConfig(gray_p=0.0)",
                (f"{BL}::test_dec_sl_crop_flip_draws_no_colour",),
            ),
            Mutant(
                "no-pretrain-unseeded",
                "no_pretrain's initialisation outside the seeded init stream",
                "        with scoped_torch_seed(ctx.seed, Stream.INIT):\n"
                "            encoder, _ = build_backbone(self.backbone.name, dict(self.backbone.params))\n"
                '        return ServerState(model=tensors_of(encoder, "encoder."))',
                "        encoder, _ = build_backbone(self.backbone.name, dict(self.backbone.params))\n"
                '        return ServerState(model=tensors_of(encoder, "encoder."))',
                (f"{FS}::test_no_pretrain_depends_only_on_init_seed",),
            ),
        ),
    ),
    "no_pretrain_bn": Target(
        "methods/no_pretrain_bn.py",
        (NB,),
        (
            Mutant(
                "calibrate-unnormalised",
                "BN statistics calibrated on images scaled to [0, 1] but not standardised",
                "view.normalize(images[i : i + CALIBRATION_BATCH])",
                "images[i : i + CALIBRATION_BATCH].float() / 255.0",
                (f"{NB}::test_a_client_uploads_the_statistics_of_its_normalised_images",),
            ),
            Mutant(
                "plain-mean",
                "the clients' statistics averaged uniformly, not by size",
                "[p.num_examples for p in payloads])",
                "[1.0 for p in payloads])",
                (f"{NB}::test_statistics_are_the_size_weighted_mean_of_the_clients",),
            ),
            Mutant(
                "broadcast-every-round",
                "the model broadcast every round, not only the first",
                "return Payload(dict(server.model) if ctx.round == 1 else {})",
                "return Payload(dict(server.model))",
                (f"{NB}::test_calibration_lifts_random_init_and_communicates_once",),
            ),
            Mutant(
                "uploads-weights",
                "every encoder tensor uploaded and averaged, not the BN statistics only",
                "up = {k: v for k, v in tensors_of(encoder, PREFIX).items() if k in names}",
                "up = tensors_of(encoder, PREFIX)",
                (f"{NB}::test_a_client_uploads_the_statistics_of_its_normalised_images",),
            ),
            Mutant(
                "encoder-train-mode",
                "the exported encoder left in train mode (batch statistics at evaluation)",
                "return self.export(encoder.eval(), feat_dim)",
                "return self.export(encoder, feat_dim)",
                equivalent="every consumer of an Encoder sets the mode it needs: the feature tasks call ``module.eval()`` (benchmark/building_blocks/features.py), the fine-tuning and probe engines theirs (tasks/finetuning/classifier.py, tasks/probes/native_engine.py)",
            ),
        ),
    ),
    "pixels": Target(
        "methods/pixels.py",
        (PX,),
        (
            Mutant(
                "features-one-channel",
                "the feature count of one channel, not C x H x W",
                "return len(inputs.mean) * inputs.image_size * inputs.image_size",
                "return inputs.image_size * inputs.image_size",
            ),
            Mutant(
                "any-backbone",
                "pixels accepts a learned backbone",
                "if backbone.name != BACKBONE:",
                "if False:",
            ),
        ),
    ),
    "iid": Target(
        "benchmark/data/partitioners/iid.py",
        (PT, IP),
        (
            Mutant(
                "no-permutation",
                "consecutive index blocks, not a random permutation",
                "list(np.array_split(rs.permutation(n), num_clients))",
                "list(np.array_split(np.arange(n), num_clients))",
                (f"{PT}::test_bit_faithful_quantity_and_homo",),
            ),
            Mutant(
                "no-generation-order",
                "iid refuses decssl_prefix (no generation order)",
                "generation_order: ClassVar[bool] = True",
                "generation_order: ClassVar[bool] = False",
                (IP,),
            ),
            Mutant(
                "larger-parts-last",
                "the ceil(n/K) parts at the end, not the start",
                "list(np.array_split(rs.permutation(n), num_clients))",
                "list(np.array_split(rs.permutation(n), num_clients))[::-1]",
                (f"{PT}::test_bit_faithful_quantity_and_homo",),
            ),
        ),
    ),
    "easyfl": Target(
        "benchmark/data/partitioners/easyfl.py",
        (SH, PT),
        (
            Mutant(
                "larger-parts-first",
                "equal_division's floor(n/P)+1 parts first, not last",
                "sizes = [base] * (parts - r) + [base + 1] * r",
                "sizes = [base + 1] * r + [base] * (parts - r)",
                (f"{SH}::test_easyfl_parts_put_the_larger_ones_last",),
            ),
            Mutant(
                "parts-floor",
                "P = floor(k K / C) parts per class, not ceil",
                "n_parts = math.ceil(k * num_clients / num_classes)",
                "n_parts = k * num_clients // num_classes",
                (f"{SH}::test_easyfl_class_assignment", f"{PT}::test_golden_digest[easyfl_class]"),
            ),
            Mutant(
                "use-count-not-bumped",
                "the heap's use count not incremented (the same class every time)",
                "heapq.heappush(heap, (times + 1, c))",
                "heapq.heappush(heap, (times, c))",
                (f"{SH}::test_easyfl_class_assignment",),
            ),
            Mutant(
                "no-shuffle",
                "the classes cut in index order, not shuffled",
                "            rs.shuffle(idx)\n            parts.append(equal_parts(idx, n_parts))",
                "            parts.append(equal_parts(idx, n_parts))",
                (f"{PT}::test_golden_digest[easyfl_class]",),
            ),
        ),
    ),
    "flesd_partitioner": Target(
        "benchmark/data/partitioners/flesd.py",
        (SH, PT),
        (
            Mutant(
                "share-wrong-axis",
                "the floor checked on class sums (always 1), not client sums",
                "share = float(mix.sum(axis=1).min())",
                "share = float(mix.sum(axis=0).min())",
                (f"{SH}::test_flesd_share_floor",),
            ),
            Mutant(
                "floor-not-over-k",
                "the floor min_prop, not min_prop / K",
                "floor = self.min_prop / num_clients",
                "floor = self.min_prop",
                (f"{SH}::test_flesd_accepts_the_first_draw_above_min_prop_over_k",),
            ),
            Mutant(
                "overlapping-slices",
                "each client's slice from the class start, not after the previous clients'",
                "taken[c] = min(taken[c] + counts[c], n_c[c])",
                "taken[c] = 0",
                (f"{PT}::test_golden_digest[flesd_minshare]",),
            ),
            Mutant(
                "no-shuffle",
                "the classes cut in index order, not shuffled",
                "        for members in per_class:\n            rs.shuffle(members)\n",
                "",
                (f"{PT}::test_golden_digest[flesd_minshare]",),
            ),
            Mutant(
                "counts-rounded",
                "int(n_c d_kc) rounded, not truncated",
                "counts = (n_c * mix[k]).astype(int)",
                "counts = np.round(n_c * mix[k]).astype(int)",
                (f"{PT}::test_golden_digest[flesd_minshare]",),
            ),
        ),
    ),
    "orchestra_partitioner": Target(
        "benchmark/data/partitioners/orchestra.py",
        (PT, SH),
        (
            Mutant(
                "sequential-sums",
                "the row sums taken after the column division (not from the same D)",
                "        dist /= col\n        dist /= row",
                "        dist /= col\n        dist /= dist.sum(axis=1, keepdims=True)",
                (f"{PT}::test_bit_faithful_orchestra",),
            ),
            Mutant(
                "sums-swapped",
                "the column and row sums swapped (wrong axes)",
                "        dist /= col\n        dist /= row",
                "        dist /= row\n        dist /= col",
                equivalent="both sums are taken from D before either division, so D / col / row "
                "and D / row / col are the same matrix up to the last bit of rounding (the "
                "bit-faithful digests agree); the wrong-axis and sequential-sums mutants are the "
                "real ones",
            ),
            Mutant(
                "counts-rounded",
                "the slice sizes rounded, not floored",
                "counts = np.floor(dist * (num_classes * n_c)[None, :]).astype(np.int64)",
                "counts = np.round(dist * (num_classes * n_c)[None, :]).astype(np.int64)",
                (f"{PT}::test_bit_faithful_orchestra",),
            ),
            Mutant(
                "balance-10",
                "10 balancing iterations, not 100",
                "balance_iters: int = 100",
                "balance_iters: int = 10",
                (f"{PT}::test_bit_faithful_orchestra",),
            ),
            Mutant(
                "overallocated-inclusive",
                "a class allocated exactly n_c refused as over-allocated",
                "if np.any(allocated > n_c):",
                "if np.any(allocated >= n_c):",
                (f"{SH}::test_orchestra_a_class_allocated_exactly_is_not_over_allocated",),
            ),
        ),
    ),
    "decssl": Target(
        "benchmark/data/partitioners/decssl.py",
        (SH, PT),
        (
            Mutant(
                "band-no-upper",
                "the size window's upper bound ignored",
                "violation = math.inf if draw.degenerate else max(lo - smallest, largest - hi, 0.0)",
                "violation = math.inf if draw.degenerate else max(lo - smallest, 0.0)",
                (
                    f"{SH}::test_band_window_and_acceptance",
                    f"{PT}::test_bit_faithful_labeldir_and_band",
                ),
            ),
            Mutant(
                "band-keeps-best",
                "keep_last returns a draw flagged not violated",
                '"constraint_violated": True,',
                '"constraint_violated": False,',
                (f"{PT}::test_bit_faithful_band_keep_last",),
            ),
            Mutant(
                "skew-share-beta",
                "a share beta, not 1 - beta, of each class to the skewed pool",
                "cut = int(len(idx) * skew_ratio)",
                "cut = int(len(idx) * beta)",
                (f"{PT}::test_bit_faithful_skew",),
            ),
            Mutant(
                "skew-iid-unshuffled",
                "the IID pool not shuffled",
                "    rs.shuffle(iid_pool)\n",
                "",
                (f"{PT}::test_bit_faithful_skew",),
            ),
            Mutant(
                "pca-uncentred",
                "PCA on uncentred features",
                "centred = x - x.mean(axis=0)",
                "centred = x",
                (f"{SH}::test_feature_clusters_recover_blobs", f"{PT}::test_golden_digest"),
            ),
            Mutant(
                "kmeans-worst-restart",
                "the restart with the largest inertia kept",
                "if best is None or inertia < best[2]:",
                "if best is None or inertia > best[2]:",
                (f"{SH}::test_kmeans_keeps_the_restart_of_least_inertia",),
            ),
            Mutant(
                "kmeanspp-last-centre-only",
                "k-means++ weights by the distance to the last centre only",
                "d2 = np.minimum(d2, _sq_dists(x, x[pick][None, :])[:, 0])",
                "d2 = _sq_dists(x, x[pick][None, :])[:, 0]",
                (f"{SH}::test_feature_clusters_recover_blobs", f"{PT}::test_golden_digest"),
            ),
            Mutant(
                "rotation-clockwise",
                "group m rotated clockwise",
                "return 360.0 * group / n_groups",
                "return -360.0 * group / n_groups",
                (
                    f"{SH}::test_rotation_groups_and_partition",
                    f"{SH}::test_rotate_image_on_a_test_pattern",
                ),
            ),
            Mutant(
                "rotate-wrong-sign",
                "the inverse map's sine sign flipped (rotates the other way)",
                "src_x = x * cos + y * sin",
                "src_x = x * cos - y * sin",
                (f"{SH}::test_rotate_image_on_a_test_pattern",),
            ),
            Mutant(
                "rotate-edge-inclusive",
                "a source row h (outside the image) read as the edge, not the fill",
                "inside = (rr >= 0) & (rr < h) & (cc >= 0) & (cc < w)",
                "inside = (rr >= 0) & (rr <= h) & (cc >= 0) & (cc < w)",
                (f"{SH}::test_rotate_image_fills_where_the_source_leaves_the_canvas",),
            ),
        ),
    ),
    "modifiers": Target(
        "benchmark/data/partitioners/modifiers.py",
        (SH,),
        (
            Mutant(
                "prefix-rounded",
                "decssl_prefix keeps round(f n), not int(f n)",
                "return int(fraction * n)",
                "return round(fraction * n)",
                (f"{SH}::test_decssl_prefix_keeps_generation_order_head",),
            ),
            Mutant(
                "prefix-tail",
                "decssl_prefix keeps the tail of the generation order",
                "return [np.asarray(ix)[: prefix_count(fraction, len(ix))] for ix in lists]",
                "return [np.asarray(ix)[len(ix) - prefix_count(fraction, len(ix)) :] for ix in lists]",
                (f"{SH}::test_decssl_prefix_keeps_generation_order_head",),
            ),
            Mutant(
                "subsample-no-decimal-round",
                "ceil(f n) on the binary product (0.55 x 100 keeps 56)",
                "return min(n, math.ceil(round(fraction * n, 9)))",
                "return min(n, math.ceil(fraction * n))",
                (f"{SH}::test_subsample_count_is_the_ceiling_of_the_decimal_product",),
            ),
            Mutant(
                "subsample-unsorted",
                "subsample permutes the client's list as given, not sorted",
                "ix = np.sort(np.asarray(ix, dtype=np.int64))",
                "ix = np.asarray(ix, dtype=np.int64)",
                (f"{SH}::test_subsample_depends_on_the_clients_set_not_its_order",),
            ),
            Mutant(
                "prefix-anywhere",
                "decssl_prefix accepted after subsample",
                "if pos != 0:",
                "if pos > 1:",
                (f"{SH}::test_subsample_and_modifier_validation",),
            ),
        ),
    ),
    "matched": Target(
        "benchmark/data/partitioners/matched.py",
        (SH,),
        (
            Mutant(
                "rounded",
                "t_kc rounded, not floored (sum_k t_kc may exceed n_c^test)",
                "want = np.floor(share * n_test).astype(np.int64)",
                "want = np.round(share * n_test).astype(np.int64)",
                (f"{SH}::test_label_matched_test",),
            ),
            Mutant(
                "partitioned-denominator",
                "n_c^train counted over the partitioned indices only (dropped ones left out)",
                "n_train = np.bincount(train_labels, minlength=num_classes)",
                "n_train = train_counts.sum(axis=0)",
                (f"{SH}::test_label_matched_test_counts_dropped_train_indices",),
            ),
            Mutant(
                "no-shuffle",
                "the test indices of a class handed out in index order",
                "        rs.shuffle(idx)\n",
                "",
                (f"{SH}::test_label_matched_test",),
            ),
            Mutant(
                "cumsum-wrong-axis",
                "block starts accumulated over classes, not clients",
                "np.cumsum(want, axis=0)",
                "np.cumsum(want, axis=1)",
                (f"{SH}::test_label_matched_test",),
            ),
        ),
    ),
}
