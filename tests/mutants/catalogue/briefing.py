"""Mutations of the briefing-pack invariants (I26-I32): atomic ingestion, no server-side
paths, path safety, limits, Markdown chunking, UTF-16 offsets and flagged citations."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401 (filled in below)

MUTATIONS: tuple[Mutation, ...] = (
)
