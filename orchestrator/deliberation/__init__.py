"""Deliberation: what a panel answers and how its answer is decided — by code, never by a model.

One module per idea; this package imports none of them, and nothing of ours outside it but
:mod:`orchestrator.core`, so the plan schema, the prompts and the worker can all use it.

- :mod:`.answers` — the plan's ``answer:`` (a choice, a number with a tolerance, free text),
  ``decide:`` (the protocol) and ``stop_when:``; how two answers are compared;
- :mod:`.verdicts` — an expert's machine-readable verdict (answer, confidence, reason): the
  line each turn ends with, parsed and validated, an abstention when it cannot be read;
- :mod:`.protocols` — the tally: plurality, confidence-weighted, Borda, consensus; every
  vote, its weight, the winner, the margin and how a tie was broken, as a decision record.
"""
