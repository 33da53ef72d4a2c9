"""Backbones: image batch → pooled features. Registered as frozen config dataclasses with
``build()``.

ResNets use torchvision's blocks and parameter names (``conv1``, ``bn1``, ``layer1.0.conv1``,
``downsample.0`` …) so that checkpoints convert to Detectron2 with a pure key mapping. ``width``
scales every stage for CPU-sized variants. The two blocks are torchvision's own code
(``torchvision.models.resnet``, BSD-3-Clause), copied here line for line with the options this
module never passes left out: importing torchvision imports ``torch._dynamo`` (its ``ops``), about
1.6 s of CPU in every process that loads the registry (a ``run`` worker, a boxed child), for two
classes. The same modules in the same order: the same parameters, initial draws and numbers.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import torch
from torch import nn

from benchmark.contracts.registries import BACKBONES


def _conv3x3(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(
        in_planes, out_planes, kernel_size=3, stride=stride, padding=1, groups=1, bias=False
    )


def _conv1x1(in_planes: int, out_planes: int, stride: int = 1) -> nn.Conv2d:
    return nn.Conv2d(in_planes, out_planes, kernel_size=1, stride=stride, bias=False)


class BasicBlock(nn.Module):
    """torchvision's ``BasicBlock`` (groups 1, base width 64, no dilation, batch norm)."""

    expansion: int = 1

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        self.conv1 = _conv3x3(inplanes, planes, stride)
        self.bn1 = nn.BatchNorm2d(planes)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = _conv3x3(planes, planes)
        self.bn2 = nn.BatchNorm2d(planes)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class Bottleneck(nn.Module):
    """torchvision's ``Bottleneck`` (ResNet v1.5: the stride on the 3×3 convolution; groups 1,
    base width 64, no dilation, batch norm)."""

    expansion: int = 4

    def __init__(
        self, inplanes: int, planes: int, stride: int = 1, downsample: nn.Module | None = None
    ) -> None:
        super().__init__()
        width = planes
        self.conv1 = _conv1x1(inplanes, width)
        self.bn1 = nn.BatchNorm2d(width)
        self.conv2 = _conv3x3(width, width, stride)
        self.bn2 = nn.BatchNorm2d(width)
        self.conv3 = _conv1x1(width, planes * self.expansion)
        self.bn3 = nn.BatchNorm2d(planes * self.expansion)
        self.relu = nn.ReLU(inplace=True)
        self.downsample = downsample
        self.stride = stride

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.relu(self.bn2(self.conv2(out)))
        out = self.bn3(self.conv3(out))
        if self.downsample is not None:
            identity = self.downsample(x)
        out += identity
        return self.relu(out)


class ResNet(nn.Module):
    """torchvision's ResNet without ``fc``: CIFAR stem (3×3/1, no max-pool) or full stem (7×7/2 +
    max-pool)."""

    def __init__(
        self,
        block: type[nn.Module],
        layers: tuple[int, ...],
        *,
        width: int = 64,
        stem: str = "cifar",
    ):
        super().__init__()
        self.inplanes = width
        if stem == "cifar":
            self.conv1 = nn.Conv2d(3, width, kernel_size=3, stride=1, padding=1, bias=False)
            self.maxpool: nn.Module = nn.Identity()
        elif stem == "full":
            self.conv1 = nn.Conv2d(3, width, kernel_size=7, stride=2, padding=3, bias=False)
            self.maxpool = nn.MaxPool2d(kernel_size=3, stride=2, padding=1)
        else:
            raise ValueError(f"stem must be 'cifar' or 'full', got {stem!r}")
        self.bn1 = nn.BatchNorm2d(width)
        self.relu = nn.ReLU(inplace=True)
        widths = [width * 2**i for i in range(len(layers))]
        self.layer1 = self._make_layer(block, widths[0], layers[0], 1)
        self.layer2 = self._make_layer(block, widths[1], layers[1], 2)
        self.layer3 = self._make_layer(block, widths[2], layers[2], 2)
        self.layer4 = self._make_layer(block, widths[3], layers[3], 2)
        self.avgpool = nn.AdaptiveAvgPool2d((1, 1))
        self.feat_dim = widths[3] * getattr(block, "expansion", 1)
        for m in self.modules():  # torchvision's initialisation
            if isinstance(m, nn.Conv2d):
                nn.init.kaiming_normal_(m.weight, mode="fan_out", nonlinearity="relu")
            elif isinstance(m, nn.BatchNorm2d):
                nn.init.ones_(m.weight)
                nn.init.zeros_(m.bias)

    def _make_layer(
        self, block: type[nn.Module], planes: int, blocks: int, stride: int
    ) -> nn.Sequential:
        expansion = getattr(block, "expansion", 1)
        downsample = None
        if stride != 1 or self.inplanes != planes * expansion:
            downsample = nn.Sequential(
                nn.Conv2d(
                    self.inplanes, planes * expansion, kernel_size=1, stride=stride, bias=False
                ),
                nn.BatchNorm2d(planes * expansion),
            )
        layers = [block(self.inplanes, planes, stride, downsample)]
        self.inplanes = planes * expansion
        layers += [block(self.inplanes, planes) for _ in range(1, blocks)]
        return nn.Sequential(*layers)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.maxpool(self.relu(self.bn1(self.conv1(x))))
        x = self.layer4(self.layer3(self.layer2(self.layer1(x))))
        return torch.flatten(self.avgpool(x), 1)


@dataclass(frozen=True, kw_only=True)
class ResNetSpec:
    version: ClassVar[str] = "1"
    family: ClassVar[str] = "resnet"
    depth: ClassVar[int] = 18
    stem: ClassVar[str] = "cifar"
    width: int = 64  # channels of the first stage; 64 is the paper's size

    def __post_init__(self) -> None:
        if self.width < 1:
            raise ValueError("width must be >= 1")

    def build(self) -> ResNet:
        block, layers = {18: (BasicBlock, (2, 2, 2, 2)), 50: (Bottleneck, (3, 4, 6, 3))}[self.depth]
        return ResNet(block, layers, width=self.width, stem=self.stem)

    @property
    def feat_dim(self) -> int:
        return self.width * 8 * (4 if self.depth == 50 else 1)


@BACKBONES.register("resnet18_cifar")
@dataclass(frozen=True, kw_only=True)
class ResNet18Cifar(ResNetSpec):
    """ResNet-18 with the CIFAR stem (3×3/1, no max-pool); 512-d features at width 64."""


@BACKBONES.register("resnet18")
@dataclass(frozen=True, kw_only=True)
class ResNet18(ResNetSpec):
    stem: ClassVar[str] = "full"


@BACKBONES.register("resnet50")
@dataclass(frozen=True, kw_only=True)
class ResNet50(ResNetSpec):
    depth: ClassVar[int] = 50
    stem: ClassVar[str] = "full"


class MicroResNet(ResNet):
    pass


@BACKBONES.register("resnet_micro")
@dataclass(frozen=True, kw_only=True)
class ResNetMicro(ResNetSpec):
    """CPU-sized: CIFAR stem, one BasicBlock per stage, widths 8/16/32/64 (width=8)."""

    width: int = 8

    def build(self) -> ResNet:
        return ResNet(BasicBlock, (1, 1, 1, 1), width=self.width, stem="cifar")


class Pixels(nn.Module):
    """The input itself as the feature vector: a normalised (N, C, H, W) batch → (N, C·H·W). No
    parameter, no buffer; its feature size is the input's (C·H·W), known only with the input, so the
    ``pixels`` reference point that evaluates it states it from the cell's input spec."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.flatten(x, 1)


@BACKBONES.register("pixels")
@dataclass(frozen=True, kw_only=True)
class PixelsSpec:
    """The identity "backbone" of the ``pixels`` reference point (methods/pixels.py): the flattened
    normalised image. Nothing to train, and no feature size of its own (``build_backbone`` gives 0):
    a method that sizes a head from the backbone cannot use it."""

    version: ClassVar[str] = "1"
    family: ClassVar[str] = "input"

    def build(self) -> Pixels:
        return Pixels()


def build_backbone(name: str, params: dict | None = None) -> tuple[nn.Module, int]:
    """(module, feature dimension) for a registered backbone."""
    from benchmark.core.config import from_mapping

    spec = from_mapping(BACKBONES.get(name), params or {})
    module = spec.build()
    return module, int(getattr(module, "feat_dim", getattr(spec, "feat_dim", 0)))
