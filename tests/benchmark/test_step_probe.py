"""``benchmark/building_blocks/local_train.py: probe_steps``, the measurement ``doctor --calibrate`` takes of
the client loop: it changes nothing it does not cap, caps each update at its steps, counts the images
in them and keeps the last step for a bare replay; outside the block nothing is recorded."""

from __future__ import annotations

import pytest
import torch

from benchmark.api import UnlabeledView, run_local_epochs
from benchmark.building_blocks.local_train import probe_steps
from benchmark.engine.rounds import SimSettings, client_context


def _ctx():
    settings = SimSettings(
        seed=3, num_rounds=1, local_epochs=2, per_round=1, device=torch.device("cpu")
    )
    return client_context(settings, 1, 0, None)


def _problem(n: int = 40):
    """A small linear model whose step draws from the update's generator (as augmentations do), so
    the order of every random draw shows in the result."""
    torch.manual_seed(0)
    net = torch.nn.Linear(12, 3)
    opt = torch.optim.SGD(net.parameters(), lr=0.1)
    images = torch.randint(0, 255, (n, 3, 2, 2), dtype=torch.uint8)
    view = UnlabeledView(images, (0.5, 0.5, 0.5), (0.5, 0.5, 0.5))
    ctx = _ctx()

    def step(batch: torch.Tensor) -> torch.Tensor:
        noise = torch.rand(batch.shape, generator=ctx.generator)
        return net((batch.float() / 255 + noise).flatten(1)).pow(2).mean()

    return net, opt, view, ctx, step


def _reference_losses(view, step, opt, ctx, batch_size: int, epochs: int) -> list[float]:
    """The local loop as it was written before the probe: epochs of batch_indices, one step each."""
    out = []
    for _ in range(epochs):
        for idx in view.batch_indices(batch_size, ctx.generator):
            loss = step(view.images[idx])
            out.append(float(loss.detach()))
            opt.zero_grad(set_to_none=True)
            loss.backward()
            opt.step()
    return out


def test_uncapped_probe_changes_no_number_and_matches_the_plain_loop() -> None:
    net, opt, view, ctx, step = _problem()
    plain = run_local_epochs(view, step, opt, ctx, batch_size=8, epochs=2).losses
    w_plain = net.weight.detach().clone()
    net, opt, view, ctx, step = _problem()
    with probe_steps() as probe:
        probed = run_local_epochs(view, step, opt, ctx, batch_size=8, epochs=2).losses
    assert probed == plain and torch.equal(net.weight, w_plain)
    net, opt, view, ctx, step = _problem()
    assert _reference_losses(view, step, opt, ctx, 8, 2) == plain  # every draw in the same order
    (u,) = probe.updates
    assert (u.steps, u.samples, u.batch_size) == (10, 80, 8) and u.loop_s > 0


def test_a_cap_stops_each_update_at_its_steps_and_keeps_the_last_step() -> None:
    net, opt, view, ctx, step = _problem(n=40)
    with probe_steps(max_steps=3) as probe:
        a = run_local_epochs(view, step, opt, ctx, batch_size=8, epochs=5)  # 25 steps uncapped
        b = run_local_epochs(view, step, opt, ctx, batch_size=8, epochs=5)
    assert a.steps == b.steps == 3 == len(a.losses) == len(b.losses)
    assert [(u.steps, u.samples) for u in probe.updates] == [(3, 24), (3, 24)]
    last = probe.last
    assert last is not None and last.optimizer is opt and tuple(last.batch.shape) == (8, 3, 2, 2)
    before = net.weight.detach().clone()
    loss = last.step_loss(last.batch)
    loss.backward()
    last.optimizer.step()
    assert not torch.equal(net.weight, before)  # the replayed step trains the same model


def test_samples_count_the_images_of_the_steps_taken() -> None:
    net, opt, view, ctx, step = _problem(n=40)
    with probe_steps(max_steps=2) as probe:
        run_local_epochs(view, step, opt, ctx, batch_size=16, epochs=1)
    assert probe.updates[0].samples == 32  # two full batches of 16


def test_outside_the_block_nothing_is_recorded_and_a_bad_cap_is_refused() -> None:
    net, opt, view, ctx, step = _problem()
    with probe_steps() as probe:
        pass
    run_local_epochs(view, step, opt, ctx, batch_size=8, epochs=1)
    assert probe.updates == [] and probe.last is None
    with pytest.raises(ValueError, match="max_steps"), probe_steps(max_steps=0):
        pass
