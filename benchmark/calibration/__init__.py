"""GPU calibration, an optional guarantee kept out of the core path: ``doctor --calibrate`` measures
a device (measure, with the cells it times in cells, the environment checks in env and the
synchronisation watch in sync), and projection reads a device's report to say what a grid's cells
cost on it (``run --dry-run``, ``plan``, the GPU launcher's memory policy)."""
