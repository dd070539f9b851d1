"""The offline model: a deterministic, key-less stand-in for an LLM (see
:mod:`tasks.llm.offline.provider`).

Modules, each importing only those above it (no circle):
:mod:`~tasks.llm.offline.text` (dice and small text tools),
:mod:`~tasks.llm.offline.lexicon` (the word lists, loaded from ``data/lexicon.json``),
:mod:`~tasks.llm.offline.options` (``OfflineOptions``),
:mod:`~tasks.llm.offline.topic` (``Topic``),
:mod:`~tasks.llm.offline.passages` (the briefing passages a prompt carries, and citing them),
:mod:`~tasks.llm.offline.reading` (reading a request),
:mod:`~tasks.llm.offline.voice` (a speaker's voice),
:mod:`~tasks.llm.offline.minutes` (the chair and the record),
:mod:`~tasks.llm.offline.writing` (the experts),
:mod:`~tasks.llm.offline.provider` (options, timing, faults, usage).
"""

from tasks.llm.offline.options import OfflineOptions
from tasks.llm.offline.provider import USAGE_METHOD, OfflineProvider
from tasks.llm.offline.reading import derived_stance, parse_positions

__all__ = ["USAGE_METHOD", "OfflineOptions", "OfflineProvider", "derived_stance", "parse_positions"]
