"""ResNet → Detectron2 key mapping (docs/protocols/evaluation.md §4.2, §7.6). Pure: no Detectron2
needed."""

from __future__ import annotations

import pickle
import re

import numpy as np
import pytest
import torch

from benchmark.api import Stream, build_backbone, scoped_torch_seed
from tasks.coco_detection.convert import (
    canonical_resnet_state,
    inflate_kernel,
    resnet_layout,
    to_detectron2,
    write_detectron2_pickle,
)

BN = ("weight", "bias", "running_mean", "running_var")


def _state(name: str, **params) -> dict[str, torch.Tensor]:
    with scoped_torch_seed(0, Stream.INIT):
        module, _ = build_backbone(name, params)
    return module.state_dict()


def expected_r18_keys(with_stem: bool) -> set[str]:
    """The table of §4.2 written out for ResNet-18 (2 BasicBlocks per stage, 1x1 shortcut in
    res3-res5)."""
    keys = {"stem.conv1.weight", *(f"stem.conv1.norm.{f}" for f in BN)} if with_stem else set()
    for stage in range(2, 6):
        for block in range(2):
            for conv in (1, 2):
                keys.add(f"res{stage}.{block}.conv{conv}.weight")
                keys.update(f"res{stage}.{block}.conv{conv}.norm.{f}" for f in BN)
        if stage > 2:
            keys.add(f"res{stage}.0.shortcut.weight")
            keys.update(f"res{stage}.0.shortcut.norm.{f}" for f in BN)
    return keys


# Detectron2's R18 backbone shapes (BasicStem 7x7/2 64; BasicBlock with the stride in conv1; 1x1
# strided shortcut)
D2_R18_SHAPES = {
    "stem.conv1.weight": (64, 3, 7, 7),
    "res2.0.conv1.weight": (64, 64, 3, 3),
    "res3.0.conv1.weight": (128, 64, 3, 3),
    "res3.0.shortcut.weight": (128, 64, 1, 1),
    "res4.1.conv2.weight": (256, 256, 3, 3),
    "res5.0.shortcut.weight": (512, 256, 1, 1),
    "res5.1.conv2.norm.running_var": (512,),
}


def _source_of(d2_key: str) -> str:
    """The inverse of the table, to check every tensor lands where its source says."""
    k = d2_key.replace("stem.conv1.norm.", "bn1.").replace("stem.conv1.", "conv1.")
    m = re.match(r"^res(\d)\.(\d+)\.(.+)$", k)
    if not m:
        return k
    rest = m.group(3)
    rest = re.sub(r"^conv(\d)\.norm\.", r"bn\1.", rest)
    rest = rest.replace("shortcut.norm.", "downsample.1.").replace(
        "shortcut.weight", "downsample.0.weight"
    )
    return f"layer{int(m.group(1)) - 1}.{m.group(2)}.{rest}"


def test_full_stem_every_tensor_lands_on_the_spec_key():
    sd = _state("resnet18")
    out = to_detectron2(sd)
    assert set(out) == expected_r18_keys(with_stem=True)
    for key, value in out.items():
        np.testing.assert_array_equal(value, sd[_source_of(key)].numpy())
    for key, shape in D2_R18_SHAPES.items():
        assert out[key].shape == shape, key


def test_cifar_stem_reinit_drops_the_stem_and_keeps_every_stage_tensor():
    sd = _state("resnet18_cifar")
    out = to_detectron2(sd, "reinit")
    assert set(out) == expected_r18_keys(with_stem=False)
    for key, value in out.items():
        np.testing.assert_array_equal(value, sd[_source_of(key)].numpy())
        if key in D2_R18_SHAPES:
            assert value.shape == D2_R18_SHAPES[key]


def test_cifar_stem_inflate_centres_the_kernel_and_keeps_the_stem_bn():
    sd = _state("resnet18_cifar")
    out = to_detectron2(sd, "inflate")
    assert set(out) == expected_r18_keys(with_stem=True)
    w7, w3 = out["stem.conv1.weight"], sd["conv1.weight"].numpy()
    assert w7.shape == (64, 3, 7, 7)
    np.testing.assert_array_equal(w7[:, :, 2:5, 2:5], w3)
    assert np.count_nonzero(w7) == np.count_nonzero(w3)
    np.testing.assert_array_equal(out["stem.conv1.norm.running_var"], sd["bn1.running_var"].numpy())


def test_inflated_kernel_computes_the_same_convolution():
    w3 = torch.randn(4, 3, 3, 3)
    x = torch.randn(1, 3, 9, 9)
    y3 = torch.nn.functional.conv2d(x, w3, padding=1)
    y7 = torch.nn.functional.conv2d(x, torch.as_tensor(inflate_kernel(w3.numpy())), padding=3)
    torch.testing.assert_close(y3, y7)


def test_dropped_tensors_and_bad_policy():
    sd = dict(_state("resnet18"))
    sd["fc.weight"] = torch.zeros(10, 512)
    sd["projector.0.weight"] = torch.zeros(4, 4)
    out = to_detectron2(sd)
    assert not any("num_batches_tracked" in k or k.startswith(("fc", "projector")) for k in out)
    with pytest.raises(ValueError):
        to_detectron2(sd, "keep")  # type: ignore[arg-type]


@pytest.mark.parametrize("name,offset", [("resnet18", 4), ("resnet18_cifar", 3)])
def test_decssl_positional_names_convert_to_the_same_result(name, offset):
    """Dec-SSL: f.0 conv1, f.1 bn1, (f.2 relu, f.3 max-pool only with the full stem), then the four
    stages."""
    sd = _state(name)
    pos = {}
    for k, v in sd.items():
        if k.startswith("conv1."):
            pos["f.0." + k[len("conv1.") :]] = v
        elif k.startswith("bn1."):
            pos["f.1." + k[len("bn1.") :]] = v
        else:
            m = re.match(r"^layer(\d)\.(.+)$", k)
            pos[f"f.{int(m.group(1)) + offset - 1}.{m.group(2)}"] = v
    pos["g.0.weight"] = torch.zeros(3, 3)  # Dec-SSL's projector is dropped
    wrapped = {f"module.{k}": v for k, v in pos.items()}
    for source in (pos, wrapped):
        a, b = to_detectron2(source, "inflate"), to_detectron2(sd, "inflate")
        assert set(a) == set(b) and all(np.array_equal(a[k], b[k]) for k in a)
    assert set(canonical_resnet_state(pos)) == set(sd)


def test_layouts():
    assert resnet_layout(_state("resnet18")) == {
        "stem": "full",
        "stem_out_channels": 64,
        "res2_out_channels": 64,
        "num_blocks": (2, 2, 2, 2),
        "block": "basic",
        "bottleneck_channels": 0,
    }
    micro = resnet_layout(_state("resnet_micro", width=8))
    assert (
        micro["stem"] == "cifar"
        and micro["num_blocks"] == (1, 1, 1, 1)
        and micro["res2_out_channels"] == 8
    )
    r50 = resnet_layout(_state("resnet50"))
    assert (
        r50["block"],
        r50["num_blocks"],
        r50["res2_out_channels"],
        r50["bottleneck_channels"],
    ) == ("bottleneck", (3, 4, 6, 3), 256, 64)
    assert "res2.0.conv3.weight" in to_detectron2(_state("resnet50"))


def test_pickle_is_in_the_detectron2_model_zoo_format(tmp_path):
    out = to_detectron2(_state("resnet_micro"))
    path = write_detectron2_pickle(out, tmp_path / "w.pkl")
    data = pickle.loads(path.read_bytes())
    assert data["__author__"] == "fssl-bench" and data["matching_heuristics"] is True
    assert set(data["model"]) == set(out) and all(
        isinstance(v, np.ndarray) for v in data["model"].values()
    )
