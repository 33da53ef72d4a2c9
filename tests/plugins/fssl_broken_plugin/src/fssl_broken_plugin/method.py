"""BrokenPlugin: the module an entry point names, failing on import as a plugin with a missing
dependency does."""

raise ImportError(
    "fssl_broken_plugin needs the package 'no-such-dependency' (broken on purpose: a test fixture)"
)
