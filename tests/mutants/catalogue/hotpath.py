"""Mutations of the hot path and its structure: one event shape (I23), one status
vocabulary (I24), layers without a loop (I25), the claim's inputs (I33), fixed statement
counts (I34), the one-statement heartbeat (I35), immutable cached specs (I36) and
resending only what is ready (I37)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401 (filled in below)

MUTATIONS: tuple[Mutation, ...] = (
)
