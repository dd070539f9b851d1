"""Series-parallel decomposition of a dependency order — what a Celery canvas can express.

A chain runs its parts one after the other; a group runs them side by side; a chain
containing a group is a chord. Those compositions express exactly the *series-parallel*
partial orders, and nothing else: a canvas for any other order would either run a phase
before one of its inputs or make it wait for something it does not depend on (a barrier
the plan does not have).

The decomposition works on the order itself (the transitive closure of the dependencies):

- if the *comparability* graph of a set is disconnected, the set is its components side
  by side (:class:`Parallel`);
- if the *incomparability* graph is disconnected, the set is its components one after
  the other (:class:`Series`) — every element of an earlier one precedes every element
  of a later one;
- if both are connected the order is not series-parallel (it contains an "N": a → c,
  a → d, b → d). Then only its minimal elements are emitted, wrapped in :class:`Open`:
  the structure continues beyond what a canvas can say, and whoever compiles it ends the
  lane there (in ``advance``) rather than invent a barrier. Nothing after an :class:`Open`
  part of a series is emitted.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class Leaf:
    key: str


@dataclass(frozen=True)
class Series:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Parallel:
    parts: tuple[Node, ...]


@dataclass(frozen=True)
class Open:
    """What could be compiled of a part that is not series-parallel (its minimal
    elements); the rest of it, and anything after it, is left to a later ``advance``."""

    part: Node


Node = Leaf | Series | Parallel | Open


def decompose(keys: Sequence[str], deps: Mapping[str, Sequence[str]]) -> Node:
    """Decompose the order on ``keys`` (in plan order) given by ``deps`` (dependencies
    outside ``keys`` are ignored). Parts keep the plan order of their first key."""
    if not keys:
        raise ValueError("nothing to decompose")
    rank = {k: i for i, k in enumerate(keys)}
    ancestors: dict[str, frozenset[str]] = {}

    def anc(key: str) -> frozenset[str]:
        if key not in ancestors:
            direct = [d for d in deps.get(key, ()) if d in rank]
            found: set[str] = set(direct)
            for d in direct:
                found |= anc(d)
            ancestors[key] = frozenset(found)
        return ancestors[key]

    for k in keys:
        anc(k)

    def comparable(a: str, b: str) -> bool:
        return a in ancestors[b] or b in ancestors[a]

    def go(members: list[str]) -> tuple[Node, bool]:
        if len(members) == 1:
            return Leaf(members[0]), True
        side_by_side = components(members, comparable)
        if len(side_by_side) > 1:
            parts = [go(c) for c in side_by_side]
            return Parallel(tuple(p for p, _ in parts)), all(done for _, done in parts)
        in_turn = components(members, lambda a, b: not comparable(a, b))
        if len(in_turn) > 1:
            inside = set(members)
            in_turn.sort(key=lambda c: min(len(ancestors[k] & inside) for k in c))
            series: list[Node] = []
            for c in in_turn:
                part, done = go(c)
                series.append(part)
                if not done:
                    break
            return (series[0] if len(series) == 1 else Series(tuple(series))), done
        inside = set(members)
        minimal = [k for k in members if not ancestors[k] & inside]
        first: Node = Leaf(minimal[0]) if len(minimal) == 1 else Parallel(tuple(Leaf(k) for k in minimal))
        return Open(first), False

    def components(members: list[str], linked: Callable[[str, str], bool]) -> list[list[str]]:
        left = list(members)
        out: list[list[str]] = []
        while left:
            seed = left.pop(0)
            comp, frontier = [seed], [seed]
            while frontier:
                cur = frontier.pop()
                near = [k for k in left if linked(cur, k)]
                for k in near:
                    left.remove(k)
                comp += near
                frontier += near
            out.append(sorted(comp, key=rank.__getitem__))
        out.sort(key=lambda c: rank[c[0]])
        return out

    node, _ = go(sorted(keys, key=rank.__getitem__))
    return node


def is_open(node: Node) -> bool:
    """Whether the end of ``node`` leaves something for a later ``advance``."""
    if isinstance(node, Open):
        return True
    if isinstance(node, Series):
        return is_open(node.parts[-1])
    if isinstance(node, Parallel):
        return any(is_open(p) for p in node.parts)
    return False


def leaves(node: Node) -> list[str]:
    if isinstance(node, Leaf):
        return [node.key]
    if isinstance(node, Open):
        return leaves(node.part)
    return [k for p in node.parts for k in leaves(p)]
