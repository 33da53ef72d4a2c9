"""Foundation: canonical JSON and digests, the component registry, strict configs, errors,
precision, seeding, the repository's paths, deviation markers, source provenance and the CPU kernel
mode (portable). Imports only the standard library, numpy and torch."""
