"""``pixels``: the input itself as the feature vector — the reference point every learned
representation has to beat to show that it learned anything the input does not already hold.

The "encoder" is the identity on the normalised image, flattened (``benchmark.building_blocks.backbones``
``pixels``: C·H·W features; 3 × 16 × 16 = 768 on the embedded digits), scored by the same task cards
(kNN, linear probe), on the same splits and seeds as every method. Nothing is trained and nothing is
communicated: like ``no_pretrain`` the rounds run empty (no payload either way), so the record's
budget and bytes are zero. The tasks normalise with the cell's dataset statistics before calling the
encoder (tasks/features.py), so the features are exactly the normalised pixels the methods' encoders
are fed.

On scikit-learn's digits a kNN or a logistic regression on the raw pixels is strong (about 96 % on
a stratified 30 % test split with scikit-learn's defaults); on the embedded default this row says
what the input alone scores under the benchmark's own cards.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import ClassVar

from benchmark.api import (
    METHODS,
    PRECISIONS,
    ClientState,
    ComponentSpec,
    Encoder,
    InputSpec,
    MethodBase,
    Payload,
    RoundContext,
    Sent,
    ServerState,
    ServerTensors,
    TrafficContext,
    UnlabeledView,
    build_backbone,
)

# the backbone this reference point evaluates (the identity on the input)
BACKBONE = "pixels"


@dataclass(frozen=True, kw_only=True)
class PixelsConfig:
    pass


def pixel_features(inputs: InputSpec) -> int:
    """The number of features of a flattened input: channels × side × side."""
    return len(inputs.mean) * inputs.image_size * inputs.image_size


@METHODS.register("pixels", aliases=("raw_pixels",))
class Pixels(MethodBase):
    """The input itself: the normalised image, flattened, as the feature vector (no training, no
    communication)."""

    name: ClassVar[str] = "pixels"
    version: ClassVar[str] = "1"
    pretrains: ClassVar[bool] = False  # trains nothing: plan counts no pre-training
    # reads neither the clients nor the partition: shared across partitions (benchmark.engine.sharing)
    partition_free: ClassVar[bool] = True
    precisions: ClassVar[tuple[str, ...]] = PRECISIONS  # no training step at all
    Config: ClassVar[type] = PixelsConfig
    payload_up: ClassVar[tuple[str, ...]] = ()
    payload_down: ClassVar[tuple[str, ...]] = ()
    smoke_settings: ClassVar[Mapping[str, object]] = {"backbone": {"name": BACKBONE}}
    frozen_knn_exempt: ClassVar[str | None] = (
        "a reference point: the input itself, not a representation learned from random init"
    )

    def __init__(self, cfg: PixelsConfig, backbone: ComponentSpec, inputs: InputSpec) -> None:
        if backbone.name != BACKBONE:
            raise ValueError(
                f"pixels scores the input itself: its backbone must be {BACKBONE!r} "
                f"(got {backbone.name!r}); set `with: {{backbone: {{name: {BACKBONE}}}}}`"
            )
        super().__init__(cfg, backbone, inputs)

    def init_server(self, ctx: RoundContext) -> ServerState:
        return ServerState(model={})

    def init_client(self, client_id: int, server: ServerState) -> ClientState:
        return ClientState()

    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload:
        return Payload({})

    def client_update(self, down, state, data, ctx):
        return Payload({}, num_examples=data.num_examples), ClientState(last_round=ctx.round)

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Nothing travels: the features are the pixels."""
        return Sent(0, 0)

    def server_aggregate(self, server, ups, ctx, public: UnlabeledView | None):
        return server

    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder:
        module, _ = build_backbone(self.backbone.name, dict(self.backbone.params))
        return self.export(module.eval(), pixel_features(self.inputs))
