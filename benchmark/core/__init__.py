"""Foundation: canonical JSON and digests, the component registry, strict configs, errors,
precision, seeding, the repository's paths, deviation markers and source provenance. Imports
only the standard library, numpy and torch."""
