"""FedMoCo, an out-of-tree fssl-bench method with per-client state (a test fixture)."""
