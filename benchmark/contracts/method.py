"""The ``Method`` protocol and the capabilities a method declares (docs/design.md §3;
docs/architecture.md).

The harness owns this contract, so it lives here and not in ``methods/``: the runner, the
simulation, conformance and submit are typed against :class:`Method` and never import a plugin
package. ``benchmark.api`` re-exports it for method authors, in-tree or not.

Everything the harness relies on is *declared* on the class, with the defaults of
:class:`MethodBase`, instead of being probed with ``hasattr``:

==========================
==========================================================================================
capability                  meaning (default) ==========================
==========================================================================================
``requires``                ``Requirement`` flags checked at grid expansion: public data, client
labels (none) ``payload_up/down``         fnmatch patterns of the tensors a client may upload / the
server may send (none) ``federation``              ``"federated"``: clients sampled each round;
``"pooled"``: one client holding the union of
                            the partition (central reference points); ``"isolated"``: nothing is communicated
``export_params``           config fields read only by :meth:`Method.encoder`; cells that differ
only in them share
                            one pre-training (``()``)
``encoder_needs_clients``   :meth:`Method.encoder` needs the final client states (local_ssl's
per-client encoders);
                            the runner then keeps them with the pre-trained state (``False``)
``smoke_settings``          cell fields a tiny CPU run of the method needs (backbone family, public
split, head
                            sizes), used by ``check-method`` and the registry smoke tests (``{}``)
``frozen_knn_exempt``       why the frozen-feature kNN check does not apply (FedMAE: fine-tuned in
its paper), or None ``pretrains``                False for reference points that train nothing
(``plan`` counts no pre-training cost) ``precisions``              the cell precisions the method
supports (``benchmark.core.precision``; default fp32 only) ``reuses``                  names of
registered methods whose *code* this one runs; their versions are part of this
                            method's version in the cell identity (:func:`identity_version`), so an edit that bumps
                            the reused method's version cannot leave a stale record of this one (``()``)
==========================
==========================================================================================
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal, Protocol, runtime_checkable

if TYPE_CHECKING:
    from torch import nn

    from benchmark.contracts.declared_traffic import Sent, ServerTensors, TrafficContext
    from benchmark.contracts.specs import ComponentSpec
    from benchmark.contracts.types import (
        ClientData,
        ClientState,
        Encoder,
        Payload,
        Requirement,
        RoundContext,
        ServerState,
    )
    from benchmark.contracts.unlabeled_view import UnlabeledView

Federation = Literal["federated", "pooled", "isolated"]
FEDERATIONS: tuple[str, ...] = ("federated", "pooled", "isolated")


@dataclass(frozen=True)
class InputSpec:
    """What the method's encoder is fed: image side and the normalisation statistics of the cell's
    dataset (the exported :class:`~benchmark.contracts.types.Encoder` carries them, so tasks
    evaluate with the encoder's own statistics)."""

    image_size: int
    mean: tuple[float, ...]
    std: tuple[float, ...]
    num_classes: int = 0  # of the dataset; only supervised reference points may use it


@runtime_checkable
class Method(Protocol):
    """One FSSL algorithm: client and server halves in one object, so that they cannot drift
    apart."""

    name: ClassVar[str]
    version: ClassVar[str]  # bump whenever numbers can change; part of the cell id
    Config: ClassVar[type]
    requires: ClassVar[frozenset[Requirement]]
    payload_up: ClassVar[tuple[str, ...]]
    payload_down: ClassVar[tuple[str, ...]]
    federation: ClassVar[Federation]
    export_params: ClassVar[tuple[str, ...]]
    encoder_needs_clients: ClassVar[bool]
    smoke_settings: ClassVar[Mapping[str, Any]]
    frozen_knn_exempt: ClassVar[str | None]
    reuses: ClassVar[tuple[str, ...]]
    precisions: ClassVar[tuple[str, ...]]
    pretrains: ClassVar[bool]
    inert_settings: ClassVar[Mapping[str, Any]]
    setup_rounds: ClassVar[int]
    evolving_client_state: ClassVar[tuple[str, ...]]
    state_read_exempt: ClassVar[Mapping[str, str]]

    def __init__(self, cfg: Any, backbone: ComponentSpec, inputs: InputSpec) -> None: ...
    def init_server(self, ctx: RoundContext) -> ServerState: ...
    def init_client(self, client_id: int, server: ServerState) -> ClientState: ...
    def broadcast(self, server: ServerState, ctx: RoundContext) -> Payload: ...
    def client_update(
        self, down: Payload, state: ClientState, data: ClientData, ctx: RoundContext
    ) -> tuple[Payload, ClientState]: ...
    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState: ...
    def encoder(
        self, server: ServerState, clients: Mapping[int, ClientState] | None = None
    ) -> Encoder: ...

    # optional, so not members here: ``upload_fold`` (MethodBase's default returns None; the engine
    # asks only if the method has it) and ``declared_traffic`` (plugin API 2.5; None: not declared)


class UploadFold(Protocol):
    """A round's aggregation taken one upload at a time (see :meth:`MethodBase.upload_fold`)."""

    def add(self, client_id: int, up: Payload) -> None: ...
    def finish(self) -> ServerState: ...


@dataclass(frozen=True)
class Inert:
    """Why a config field does not move a method's first round on the live-settings cell
    (:mod:`benchmark.commands.live_settings`: one tiny round, its uploads and the server's aggregate of
    them), declared in the method's ``inert_settings``. ``live_with``: other config values under
    which the field does move it (the check verifies that); ``from_round``: the round from which it
    acts (2: a client's kept state, read at its next participation; checked by playing that round
    too). Without either the check verifies only the claim itself, that changing the field moves
    nothing there."""

    reason: str
    live_with: Mapping[str, Any] = field(default_factory=dict)
    from_round: int = 1


# The plugin API's version (docs/adding-a-method.md §10): MAJOR moves when a plugin written for the
# previous one stops working (a hook's signature, a required base class); MINOR when names are only
# added.
API_VERSION = "2.5"
_API1_HOOKS = ("broadcast", "client_update", "server_aggregate", "encoder")


def explain_refusal(name: str, obj: Any) -> str | None:
    """The one-line refusal of a plugin written for plugin API 1 (a plain class with the method
    hooks), naming the change and the migration; None for anything else (the registry's generic
    message applies)."""
    if not (isinstance(obj, type) and all(callable(getattr(obj, h, None)) for h in _API1_HOOKS)):
        return None
    return (
        f"method {name!r} ({obj.__module__}.{obj.__qualname__}) is a plain class written for "
        f"plugin API 1; plugin API {API_VERSION} requires "
        f"`class {obj.__name__}(benchmark.api.MethodBase)`, the constructor (cfg, backbone, "
        f"inputs) and encoder(server, clients=None) returning a complete Encoder, with "
        f"capabilities declared as class attributes (see docs/adding-a-method.md §10)"
    )


class MethodBase:
    """The defaults of every declared capability, and the plumbing every method shares (config,
    backbone spec, input spec, a complete :class:`~benchmark.contracts.types.Encoder`). Subclass it
    once; never subclass a concrete method — reuse shared pieces (``methods/_shared``) or declare
    ``reuses``."""

    name: ClassVar[str]
    version: ClassVar[str] = "1"
    Config: ClassVar[type]
    requires: ClassVar[frozenset[Requirement]] = frozenset()
    payload_up: ClassVar[tuple[str, ...]] = ()
    payload_down: ClassVar[tuple[str, ...]] = ()
    federation: ClassVar[Federation] = "federated"
    export_params: ClassVar[tuple[str, ...]] = ()
    encoder_needs_clients: ClassVar[bool] = False
    smoke_settings: ClassVar[Mapping[str, Any]] = {}
    frozen_knn_exempt: ClassVar[str | None] = None
    reuses: ClassVar[tuple[str, ...]] = ()
    # the precisions whose training steps the method takes through ctx.precision (autocast +
    # LossScaler); a method that never heard of them trains in fp32 only, and the grid refuses a
    # bf16/fp16 cell of it at expansion
    precisions: ClassVar[tuple[str, ...]] = ("fp32",)
    # False for reference points that train nothing (random init): `plan` counts no pre-training for
    # their cells
    pretrains: ClassVar[bool] = True
    # True when nothing the method computes reads the clients' data or the partition (no_pretrain's
    # seeded initialisation, pixels): its cells that differ only in their partition are computed
    # once per run root and shared (benchmark.engine.sharing; a pooled method is shared by its
    # pooled union without declaring anything). Calibrating BatchNorm on the clients
    # (no_pretrain_bn) reads them: False
    partition_free: ClassVar[bool] = False
    # config fields (dotted paths into nested configs: "augment.blur_sigma") that do not move the
    # first round of the live-settings cell, each with why (a reason, or an :class:`Inert` naming the
    # settings under which it does): every other field must move it (benchmark.commands.live_settings)
    inert_settings: ClassVar[Mapping[str, str | Inert]] = {}
    # leading rounds in which no client trains by design (Orchestra's initialisation round: 1):
    # their participations are not counted as clients that took no step (compute.clients_without_step)
    setup_rounds: ClassVar[int] = 0
    # fnmatch patterns of the ClientState tensors that change each time the client trains (a queue, a
    # momentum network, local BN statistics, optimizer moments): check-method requires them to differ
    # between a client's rounds 1 and 2. The default, every tensor, fits state that is trained or
    # written every round; a method keeping a tensor constant by design (a per-client mask fixed at
    # init) narrows it. Left undeclared (a plugin written before API 2.3), only the floating-point
    # tensors are required to change: an integer pointer or counter may end a round where it began
    evolving_client_state: ClassVar[tuple[str, ...]] = ("*",)
    # fnmatch pattern of ClientState tensors -> why check-method's state_read check may not see
    # them read on its smoke cell (read only under another config or a condition the cell does not
    # reach; read by encoder() alone). Not perturbed; the report lists them with the reason
    state_read_exempt: ClassVar[Mapping[str, str]] = {}

    @classmethod
    def check_data(cls, cfg: Any, *, client_sizes: Sequence[int], public_size: int | None) -> None:
        """Reject a configuration the cell's data makes impossible, before any cell runs (``run``
        checks every cell at the door, ``prepare`` again): raise ValueError with the reason. The
        default accepts everything."""

    def __init__(self, cfg: Any, backbone: ComponentSpec, inputs: InputSpec) -> None:
        self.cfg = cfg
        self.backbone = backbone
        self.inputs = inputs

    def upload_fold(
        self, server: ServerState, sizes: Mapping[int, int], ctx: RoundContext
    ) -> UploadFold | None:
        """Optionally, this round's ``server_aggregate`` as a fold over the uploads, so the engine
        need not hold them.

        ``sizes`` maps each sampled client to its number of training examples, before any trains. A
        method whose aggregation needs nothing else up front (FedAvg:
        :class:`benchmark.building_blocks.aggregate.FedAvgFold`) returns a fold; the engine then passes each
        upload to ``fold.add`` as its client finishes, in client-id order, frees its tensors, and
        takes the round's server state from ``fold.finish()`` instead of calling
        ``server_aggregate``. The fold must give what ``server_aggregate`` gives on the same
        uploads, bit for bit (``check-method`` compares them). The default, None, has the engine
        collect every upload and call ``server_aggregate``."""
        return None

    def declared_traffic(self, tensors: ServerTensors, at: TrafficContext) -> Sent | None:
        """Optionally (plugin API 2.5), the bytes one sampled client uploads and receives in round
        ``at.round`` (``benchmark.contracts.declared_traffic``): a pure function of ``self.cfg``, ``at`` and
        the shapes of the server's tensors (the cell's initial server state), equal to what the
        runner counts from the payloads (``check-method`` compares them). ``accept`` then derives a
        record's traffic from it and refuses any other figure.
        The default, None, declares nothing: the record's traffic is shown as the submitter's word
        ("traffic not derived"); ``payload_up``/``payload_down`` stay what they were."""
        return None

    def export(self, module: nn.Module, feat_dim: int | None = None, **fields: Any) -> Encoder:
        """A complete :class:`Encoder` of ``module`` (eval mode): its feature size, the backbone
        name, the architecture fingerprint and the cell's input statistics; ``fields`` adds members,
        classifier, extras, …"""
        from benchmark.contracts.types import Encoder, arch_fingerprint

        return Encoder(
            module=module,
            feat_dim=int(feat_dim if feat_dim is not None else module.feat_dim),
            backbone=self.backbone.name,
            fingerprint=arch_fingerprint(module),
            input_size=self.inputs.image_size,
            mean=tuple(self.inputs.mean),
            std=tuple(self.inputs.std),
            **fields,
        )


def identity_version(cls: type, lookup: Callable[[str], type], _chain: tuple[str, ...] = ()) -> str:
    """The version string a method contributes to the cell identity: its own ``version``, followed
    by ``+name@version`` for each method whose code it ``reuses`` (recursively, in declaration
    order).

    A method that reuses nothing keeps its plain version, so declaring this mechanism moved no cell
    id. A method that reuses itself, directly or through others, has no version: ValueError naming
    the cycle."""
    chain = (*_chain, cls.name)
    if cls.name in _chain:
        raise ValueError(f"method {cls.name!r} reuses itself: {' -> '.join(chain)}")
    own = str(cls.version)
    parts = [f"{name}@{identity_version(lookup(name), lookup, chain)}" for name in cls.reuses]
    return "+".join([own, *parts])


__all__ = ["FEDERATIONS", "Federation", "InputSpec", "Method", "MethodBase", "identity_version"]
