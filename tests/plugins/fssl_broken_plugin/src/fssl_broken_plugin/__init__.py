"""A broken out-of-tree fssl-bench method (test fixture): the package imports, its ``method`` module
does not."""
