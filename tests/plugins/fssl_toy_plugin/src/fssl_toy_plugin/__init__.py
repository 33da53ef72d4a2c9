"""An out-of-tree fssl-bench method (test fixture); the registry imports ``fssl_toy_plugin.method``
lazily."""
