"""The shape of a mutation: a named, small patch that breaks one invariant of DESIGN.md.

A mutation is anchored by exact text: each :class:`Edit` replaces an ``old`` snippet
that must occur exactly once in its file. When the code moves, the runner's check
names the mutation and the snippet that no longer matches; re-anchor it by copying
the new text of the guarded line into ``old`` (and the broken version into ``new``).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Edit:
    old: str
    new: str


@dataclass(frozen=True)
class Mutation:
    name: str  # stable, kebab-case: what the mutant does wrong
    invariant: str  # an id of DESIGN.md's invariant table (I1, I2, ...)
    file: str  # relative to the repository root
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # pytest node ids expected to fail on the mutant (the fastest that do)
    why: str  # the behaviour the mutant breaks, in a sentence


def mutation(name: str, invariant: str, file: str, old: str, new: str, *, tests: tuple[str, ...],
             why: str) -> Mutation:
    """A mutation made of one edit (most are)."""
    return Mutation(name, invariant, file, (Edit(old, new),), tests, why)
