"""Every built-in task, registered once: its name and aliases, its class (imported on first use) and
the datasets it reads besides the cell's own. pyproject.toml declares this module as the tasks'
built-in registration (entry-point group ``fssl_bench.builtins``).

Torch-free (the ``benchmark.api`` names used here import without torch): ``run`` reads the data
declarations before it imports torch, so that a machine without the data hears so at once; the full
preflight reads the same declarations for every expanded cell.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from benchmark.api import PUBLISHED_CARDS, reads_param, register_task


def coco_reads(params: Mapping[str, Any]) -> tuple[str, ...]:
    """COCO 2017 under the data root, unless an explicit COCO root is given or the embedded shapes
    are used."""
    own = params.get("dataset", "coco2017") == "coco2017" and not params.get("coco_root")
    return ("coco2017",) if own else ()


# probes: the encoder frozen, a classifier read from its features
register_task("knn", target="tasks.probes.knn:KNN")
register_task("linear_probe", aliases=("linear",), target="tasks.probes.linear_probe:LinearProbe")
register_task(
    "perclient",
    aliases=("personalised", "personalized"),
    target="tasks.probes.perclient:PerClient",
)
register_task(
    "transfer",
    aliases=("transfer_linear",),
    target="tasks.probes.transfer:Transfer",
    reads=reads_param("target", "stl10"),
)
register_task("linear_native", target="tasks.probes.native_probe:LinearNative")
register_task("semisup_native", target="tasks.probes.native_probe:SemisupNative")
register_task(
    "transfer_native",
    target="tasks.probes.native_probe:TransferNative",
    reads=reads_param("target", "stl10"),
)
# fine-tuning: the encoder trained with a classifier on labelled data, or the method's own one
register_task(
    "finetune",
    aliases=("fine_tune", "finetune_fedmae"),
    target="tasks.finetuning.finetune:Finetune",
    reads=reads_param("target", None),
)
register_task(
    "semi_supervised",
    aliases=("semisup",),
    target="tasks.finetuning.semi_supervised:SemiSupervised",
)
register_task(
    "e2e_classifier", aliases=("e2e",), target="tasks.finetuning.e2e_classifier:E2EClassifier"
)
# reconstruction: a masked autoencoder's own pixels
register_task("reconstruction", aliases=("recon",), target="tasks.reconstruction:Reconstruction")
# detection: Detectron2, imported only inside the task's run
register_task(
    "coco_detection",
    aliases=("detection",),
    target="tasks.coco_detection.task:CocoDetection",
    reads=coco_reads,
)

# the project's published protocol cards (tasks/cards/*.json), which bound a re-evaluation
PUBLISHED_CARDS.register("project", target="tasks.cards:load_card")
