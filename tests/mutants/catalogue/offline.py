"""Mutations of the offline model and error-reporting invariants (I38-I43): bounded
options, gated fault switches, a lazy abortable stream, shutdown gives phases back,
upstream errors and internal errors shown safely."""

from __future__ import annotations

from tests.mutants.catalogue_types import Edit, Mutation, mutation  # noqa: F401 (filled in below)

MUTATIONS: tuple[Mutation, ...] = (
)
