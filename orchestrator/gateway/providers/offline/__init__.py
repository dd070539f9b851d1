"""The offline model: a deterministic, key-less stand-in for an LLM (see
:mod:`orchestrator.gateway.providers.offline.provider`).

Modules, each importing only those above it (no circle):
:mod:`~orchestrator.gateway.providers.offline.text` (dice and small text tools),
:mod:`~orchestrator.gateway.providers.offline.lexicon` (the word lists, loaded from ``data/lexicon.json``),
:mod:`~orchestrator.gateway.providers.offline.options` (``OfflineOptions``, ``SolverOptions``),
:mod:`~orchestrator.gateway.providers.offline.verdict_line` (answer specs, peers' verdicts, the verdict line),
:mod:`~orchestrator.gateway.providers.offline.topic` (``Topic``),
:mod:`~orchestrator.gateway.providers.offline.citing` (the briefing passages a prompt carries, and citing them),
:mod:`~orchestrator.gateway.providers.offline.understanding` (reading a request),
:mod:`~orchestrator.gateway.providers.offline.solver` (the simulated solver of a ``What is <expr>?`` question),
:mod:`~orchestrator.gateway.providers.offline.judging` (what an expert's or the chair's verdict says),
:mod:`~orchestrator.gateway.providers.offline.voice` (a speaker's voice),
:mod:`~orchestrator.gateway.providers.offline.minutes` (the chair and the record),
:mod:`~orchestrator.gateway.providers.offline.writing` (the experts),
:mod:`~orchestrator.gateway.providers.offline.provider` (options, timing, faults, usage).
"""

from orchestrator.gateway.providers.offline.options import OfflineOptions
from orchestrator.gateway.providers.offline.provider import USAGE_METHOD, OfflineProvider
from orchestrator.gateway.providers.offline.understanding import derived_stance, parse_positions

__all__ = ["USAGE_METHOD", "OfflineOptions", "OfflineProvider", "derived_stance", "parse_positions"]
