"""Downstream tasks. Importing this package registers the built-in tasks; heavy ones register lazily."""

from tasks import knn, linear_probe  # noqa: F401
