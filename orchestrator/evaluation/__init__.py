"""``conclave eval``: how a panel of experts deciding by a vote is measured against one model
and against self-consistency (one model sampled n times, majority vote).

The pure parts need nothing but the standard library, so a report can be recomputed from
stored answers anywhere:

- :mod:`.statistics` — intervals and tests on measured answers: Wilson intervals, the exact
  McNemar test on paired items, the effective number of independent votes, flip rates
  between rounds, agreement, position bias of anonymised reviews;
- :mod:`.theory` — the exact accuracy a decision rule should reach under the simulation's
  model (independent or one-factor correlated experts), printed beside the measurement;
- :mod:`.datasets` — the JSONL item format (:func:`~.datasets.load_items`,
  :func:`~.datasets.dump_items`) and the seeded arithmetic generator whose question text
  the simulated solver parses (:func:`~.datasets.generate`,
  :func:`~.datasets.evaluate_expression`);
- :mod:`.outcomes` — :class:`~.outcomes.ItemOutcome`, what one item of one arm came to;
- :mod:`.report` — :func:`~.report.build_report`: every figure of an eval from its stored
  record and outcomes (the input contract is its docstring), its values in :mod:`.figures`,
  its terminal tables in :mod:`.report_text` (over :mod:`.tables`);
- :mod:`.comparison` — :func:`~.comparison.compare_reports`: two runs, arm by arm.

The harness sits above the client (it reaches the deployment only through the
:class:`~orchestrator.client.conclave.Conclave` facade, embedded, cluster or HTTP alike):

- :mod:`.spec` — the eval spec a user writes, and the record resolved from it that the
  database keeps (items, arms, each arm's plan template);
- :mod:`.arms` — each arm's plan of an item (task id, labels, answer), and self-consistency's n;
- :mod:`.scoring` — whether an answer is right (exact, numeric, a judge's grade);
- :mod:`.harness` — running an eval as durable plans, resumable; :mod:`.progress` shows it;
- :mod:`.collect` — the outcomes read back from the stored plans alone;
- :mod:`.commands` — ``conclave eval run | report | compare``.

One module per idea; this package imports none of them.
"""
