"""Mutations of the trust boundary: the operator's model registry (I17), egress pinning
(I18) and secrets read at call time, never shown (I19)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401 (filled in below)

MUTATIONS: tuple[Mutation, ...] = (
)
