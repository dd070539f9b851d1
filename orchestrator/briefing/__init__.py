"""Briefing packs: the user's own documents, chunked, searchable and citable.

One module per idea; this package imports none of them, so ``orchestrator.plan.schema`` can
use :mod:`.spec` without a cycle.

- :mod:`.spec` — the ``briefing:`` entries of a plan (inline text, or a local path);
- :mod:`.reading` — the user's side: local paths read safely into inline documents
  (:func:`~.reading.load_local_plan`, called by the CLI and the embedded client);
- :mod:`.chunking` — Markdown-aware chunks with heading paths and UTF-16 offsets;
- :mod:`.ingest` — limits and chunking at submit (:func:`~.ingest.ingest`, called by
  ``Coordinator.submit``; the result is stored by ``storage.plans.create_plan`` in the
  plan's own transaction);
- :mod:`.retrieval` — the search query for a call and the passages that fit a budget;
- :mod:`.rerank` — the optional embedding reranker (``conclave[rerank]``);
- :mod:`.passages` — run-time glue over storage: :func:`~.passages.retrieve` and
  :func:`~.passages.cite`;
- :mod:`.citations` — ``[doc:chunk]`` citations found and resolved;
- :mod:`.utf16` — the one place code points become UTF-16 code units.
"""
