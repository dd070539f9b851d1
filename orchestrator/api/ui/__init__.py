"""The live plan page, served by the API under ``/ui`` (:mod:`~orchestrator.api.ui.routes`).

``/ui/`` lists the caller's plans; ``/ui/plans/{id}`` shows one plan's phase graph with
live statuses, each expert's words as they are spoken, debates as they are inserted,
usage and timings, and the synthesis with its citations linked — phase citations
(``[r1.dana]``) to the phase they cite, briefing citations (``[memo:2]``) to the passage,
highlighted in its document.

The server renders HTML (:mod:`~orchestrator.api.ui.html`, :mod:`~orchestrator.api.ui.plan_list`,
:mod:`~orchestrator.api.ui.plan_page`, :mod:`~orchestrator.api.ui.login`) from what it reads
(:mod:`~orchestrator.api.ui.snapshot`); one small script, ``static/plan.js``, follows the
plan's event stream and reads the JSON routes (GETs only). No build step. A browser
authenticates with a session cookie (:mod:`orchestrator.api.session`).
"""

from orchestrator.api.ui.routes import ui_router

__all__ = ["ui_router"]
