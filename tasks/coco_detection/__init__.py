"""COCO detection and instance segmentation through Detectron2 (docs/protocols/evaluation.md §4).

Registered lazily: importing this package (which ``tasks/__init__`` does for every subpackage)
imports neither Detectron2 nor the task module. ``TASKS.get("coco_detection")`` imports
``tasks.coco_detection.task``, which is itself Detectron2-free; Detectron2 is imported only inside
``CocoDetection.run``.
"""

from benchmark.api import TASKS

TASKS.register(
    "coco_detection", aliases=("detection",), target="tasks.coco_detection.task:CocoDetection"
)
