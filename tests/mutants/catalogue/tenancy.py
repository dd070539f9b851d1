"""Mutations of the tenancy invariants: the submit rate (I16), plan and task ids (I20),
tokens (I21) and the audit trail (I22)."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401 (filled in below)

MUTATIONS: tuple[Mutation, ...] = (
)
