"""Grids: the YAML files beside their expansion into cells (expand) and the run plan (plan)."""
