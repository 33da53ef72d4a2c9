"""COCO detection and instance segmentation through Detectron2 (docs/protocols/evaluation.md §4).

Registered lazily (``tasks/registration.py``): ``TASKS.get("coco_detection")`` imports
``tasks.coco_detection.task``, which is itself Detectron2-free; Detectron2 is imported only inside
``CocoDetection.run``.
"""
