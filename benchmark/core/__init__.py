"""Foundation: canonical JSON and digests, the component registry, strict configs, errors,
precision, seeding, the repository's paths, deviation markers and source provenance (the CPU kernel
mode lives in benchmark/portable/). Imports only the standard library, numpy and torch."""
