"""The portable CPU kernel mode, an optional guarantee kept out of the core path: the mode itself
(mode: the switch, its environment and its record entry), the few operations computed in forms that
do not depend on the CPU's vendor under it (math_ops), and the kernel fingerprint that shows two
machines compute the same (``verify --kernels``: ops, census, fingerprint)."""
