"""benchmark/building_blocks/aggregate.py: ``weighted_average`` folds its states through ``RunningAverage``,
a flat float64 sum that must be, bit for bit, the per-tensor float64 sum FedAvg always computed
(records made before and after it are identical), whether the states come at once or one at a time."""

from __future__ import annotations

import pytest
import torch

from benchmark.building_blocks.aggregate import RunningAverage, weighted_average


def per_tensor_reference(states, weights):
    """The FedAvg sum written per tensor: 0 + Σ_k (w_k/Σw)·x_k in float64, in order, cast back to
    the first state's dtype; integer tensors and tensors equal in every state are the first state's."""
    total = float(sum(weights))
    out = {}
    for key, first in states[0].items():
        if not first.is_floating_point() or all(torch.equal(s[key], first) for s in states[1:]):
            out[key] = first.clone()
            continue
        acc = torch.zeros_like(first, dtype=torch.float64)
        for s, w in zip(states, weights):
            acc += (float(w) / total) * s[key].to(torch.float64)
        out[key] = acc.to(first.dtype)
    return out


def states(n: int, seed: int = 0) -> list[dict[str, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    shared = torch.randn(5, generator=g)
    out = []
    for k in range(n):
        conv = torch.randn(4, 3, 3, 3, generator=g).to(memory_format=torch.channels_last)
        zeros = torch.zeros(6)
        zeros[::2] = -0.0  # 0 + (-0.0) is +0.0: a sum must start from zero as the reference does
        if k == 1:
            zeros[1] = -1e-30
        half = torch.randn(7, generator=g).half()
        nan = torch.randn(3, generator=g)
        if k == 2:
            nan[1] = float("nan")
        out.append(
            {
                "conv.weight": conv,
                "fp16": half,
                "bf16": torch.randn(2, 3, generator=g).bfloat16(),
                "fp64": torch.randn(4, generator=g, dtype=torch.float64),
                "scalar": torch.randn((), generator=g),
                "signed_zeros": zeros,
                "same": shared.clone(),
                "all_neg_zero": torch.full((3,), -0.0),
                "nan": nan,
                "counter": torch.tensor(k + 10),
            }
        )
    return out


def bits(t: torch.Tensor) -> torch.Tensor:
    return t.contiguous().reshape(-1).view(torch.uint8)


@pytest.mark.parametrize("weights", [[1, 5, 2, 3], [0.25] * 4, [143, 144, 143, 1]])
def test_the_flat_sum_is_the_per_tensor_float64_sum_bit_for_bit(weights) -> None:
    ss = states(len(weights))
    ref = per_tensor_reference(ss, weights)
    out = weighted_average(ss, weights)
    assert list(out) == list(ref)
    for key in ref:
        assert out[key].dtype == ref[key].dtype, key
        # the first state's memory layout (channels_last here)
        assert out[key].stride() == ref[key].stride(), key
        assert torch.equal(bits(out[key]), bits(ref[key])), key
    # equal everywhere: the first's
    assert torch.equal(bits(out["all_neg_zero"]), bits(torch.full((3,), -0.0)))
    assert out["same"].data_ptr() != ss[0]["same"].data_ptr()  # a copy, never the input itself


def fp32_states(
    n: int, seed: int = 0, *, every_element_differs: bool = False
) -> list[dict[str, torch.Tensor]]:
    """float32 only, as the FedAvg methods upload (the single-dtype flattening path), channels_last
    conv weights."""
    g = torch.Generator().manual_seed(seed)
    fixed = torch.randn(3, generator=g)
    out = []
    for _ in range(n):
        s = {
            "conv": torch.randn(4, 3, 3, 3, generator=g).to(memory_format=torch.channels_last),
            "t": torch.randn(3, 5, generator=g).t(),  # a transposed (non-contiguous) tensor
            "bias": torch.randn(4, generator=g),
            "scalar": torch.randn((), generator=g),
        }
        if not every_element_differs:
            s["fixed"] = fixed.clone()
        out.append(s)
    return out


@pytest.mark.parametrize("every_element_differs", [False, True])
def test_the_single_dtype_path_is_the_per_tensor_sum_bit_for_bit(
    every_element_differs: bool,
) -> None:
    ss = fp32_states(5, every_element_differs=every_element_differs)
    # the fold stops looking for equal tensors after state 2: a later repeat of the
    if every_element_differs:
        # first state must still be averaged, not shortcut
        ss[3] = {k: v.clone() for k, v in ss[0].items()}
    weights = [143, 144, 143, 12, 7]
    ref, out = per_tensor_reference(ss, weights), weighted_average(ss, weights)
    assert list(out) == list(ref)
    for key in ref:
        assert out[key].stride() == ref[key].stride() and torch.equal(
            bits(out[key]), bits(ref[key])
        ), key


def test_weights_may_be_an_array_or_a_tensor() -> None:
    import numpy as np

    ss = fp32_states(2)
    ref = weighted_average(ss, [1.0, 3.0])
    for weights in (np.array([1.0, 3.0]), torch.tensor([1.0, 3.0], dtype=torch.float64)):
        assert all(
            torch.equal(bits(a), bits(b))
            for a, b in zip(weighted_average(ss, weights).values(), ref.values())
        )


def test_one_state_at_a_time_is_the_same_as_all_at_once() -> None:
    ss, weights = states(4, seed=1), [3, 1, 4, 1]
    avg = RunningAverage(weights)
    for s in ss:
        avg.add(s)
        # an added state may be reused (the engine frees it): the fold kept what it needs
        s["conv.weight"].fill_(7.0)
    fresh = states(4, seed=1)
    assert all(
        torch.equal(bits(a), bits(b))
        for a, b in zip(avg.result().values(), weighted_average(fresh, weights).values())
    )


def test_identical_states_come_back_exactly() -> None:
    s = states(1)[0]
    out = weighted_average([s, s, s], [1, 5, 2])  # (1/8 + 5/8 + 2/8)·x need not round to x
    assert all(torch.equal(bits(out[k]), bits(s[k])) for k in s)


def test_misuse_is_refused() -> None:
    ss = states(2)
    with pytest.raises(ValueError, match="positive"):
        RunningAverage([0, 0])
    avg = RunningAverage([1, 1])
    avg.add(ss[0])
    with pytest.raises(ValueError, match="2 weights but 1 states"):
        avg.result()
    bad = dict(ss[1], fp64=torch.zeros(2, 2))
    with pytest.raises(ValueError, match="'fp64' has shape"):
        avg.add(bad)
    avg.add(ss[1])
    with pytest.raises(ValueError, match="this is state 3"):
        avg.add(ss[0])
