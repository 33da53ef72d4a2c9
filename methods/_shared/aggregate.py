"""Server-side aggregation: the harness's functions (``benchmark.building_blocks.aggregate``, offered to
every method through ``benchmark.api``), and FedAvg's server step written once
(:class:`FedAvgServer`) for the methods that average their uploads."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from benchmark.api import (
    FedAvgFold,
    Payload,
    RoundContext,
    RunningAverage,
    ServerState,
    UnlabeledView,
    aggregation_weights,
    average_uploads,
    weighted_average,
)


class FedAvgServer:
    """FedAvg's server step for a method's hooks: the n_k- (or uniformly) weighted average of every
    uploaded tensor, folded as the uploads come (``upload_fold``) and, for a whole round at once
    (``server_aggregate``), the same fold over the uploads in client-id order, so the two agree bit
    for bit. Where the weights are the clients' to say (``fedavg_folds`` False), nothing folds and
    the round is averaged at once with :func:`average_uploads`.

    A mixin listed before ``MethodBase`` (or a family base). The method or its family says how it
    weighs: ``fedavg_weighting()``, the mode of :func:`aggregation_weights` (``num_examples`` or
    ``uniform``); and whether the uploads replace the server tensors they name (``fedavg_merge``)
    or are the model.
    """

    fedavg_merge: ClassVar[bool] = True
    cfg: Any

    def fedavg_folds(self) -> bool:
        """Whether the server knows the weights before the round (the sampled clients' sizes)."""
        return True

    def upload_fold(
        self, server: ServerState, sizes: Mapping[int, int], ctx: RoundContext
    ) -> FedAvgFold | None:
        if not self.fedavg_folds():
            return None
        return FedAvgFold(server, sizes, self.fedavg_weighting(), merge=self.fedavg_merge)

    def server_aggregate(
        self,
        server: ServerState,
        ups: Mapping[int, Payload],
        ctx: RoundContext,
        public: UnlabeledView | None,
    ) -> ServerState:
        if not ups:
            return server
        fold = self.upload_fold(server, {k: up.num_examples for k, up in ups.items()}, ctx)
        if fold is None:
            avg = average_uploads(ups, self.fedavg_weighting())
            model = {**server.model, **avg} if self.fedavg_merge else avg
            return ServerState(model=model, extra=server.extra)
        for k in sorted(ups):
            fold.add(k, ups[k])
        return fold.finish()


__all__ = [
    "FedAvgFold",
    "FedAvgServer",
    "RunningAverage",
    "aggregation_weights",
    "average_uploads",
    "weighted_average",
]
