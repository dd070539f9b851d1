"""The control plane's read side: what a plan is, what it said, what it was briefed with.

:class:`PlanReads` answers from stored rows only; it never decides or sends anything
(that is :class:`~orchestrator.control.coordinator.Coordinator`'s job). A ``principal``
finds only its tenant's plans — another tenant's plan is "not found", so ids never leak
across tenants — and None (an admin's reach, or the operator's) finds every tenant's.
"""

from __future__ import annotations

from typing import Any

from orchestrator.briefing.documents import CitationView, DocumentSummary, DocumentView
from orchestrator.briefing.passages import cite
from orchestrator.core.errors import DocumentNotFound, translate_storage
from orchestrator.plan.plan_diff import Comparison, compare
from orchestrator.plan.views import PlanView, plan_view
from storage import Database, briefings, contents, listing, outbox, plans, usage
from storage import exceptions as storage_errors
from storage.identity import Principal
from storage.plans import PlanState
from storage.read_models import EventRecord, PlanRecord


def reach(principal: Principal | None) -> str | None:
    """The tenant whose plans ``principal`` sees; None: every tenant (an admin, or the
    operator, who calls without a principal)."""
    return None if principal is None else principal.reach


class PlanReads:
    def __init__(self, db: Database) -> None:
        self.db = db

    def resolve(self, ref: str, principal: Principal | None) -> str:
        """The plan id ``ref`` names, among the plans ``principal`` may see: its tenant's,
        or every tenant's for an admin or the operator (None). Another tenant's plan is
        "not found": ids never leak across tenants."""
        tenant = reach(principal)
        return plans.resolve(self.db, ref, tenant=tenant)

    @translate_storage
    def state(self, ref: str, *, principal: Principal | None = None) -> PlanState:
        return plans.load_state(self.db, self.resolve(ref, principal))

    @translate_storage
    def view(self, ref: str, *, principal: Principal | None = None) -> PlanView:
        """What a user sees of the plan (:mod:`orchestrator.plan.views`), derived from stored rows."""
        state = self.state(ref, principal=principal)
        return plan_view(state, usage.rows_for_plan(self.db, state.plan.id))

    @translate_storage
    def list_plans(self, *, principal: Principal | None = None, **filters: Any) -> listing.Page:
        """A page of the plans ``principal`` may see, newest first (:func:`storage.listing.list_plans`)."""
        tenant = reach(principal)
        return listing.list_plans(self.db, tenant=tenant, **filters)

    @translate_storage
    def result_text(self, ref: str, *, principal: Principal | None = None) -> str | None:
        state = self.state(ref, principal=principal)
        terminal = [p for p in state.phases if p.meta.get("terminal")]
        return contents.read_text(self.db, state.plan.id, terminal[-1].key) if terminal else None

    @translate_storage
    def phase_text(self, plan_id: str, key: str) -> str | None:
        return contents.read_text(self.db, plan_id, key)

    @translate_storage
    def documents(self, ref: str, *, principal: Principal | None = None) -> list[DocumentSummary]:
        """The plan's briefing documents, in briefing order (none for a plan without one)."""
        return [DocumentSummary.of(d) for d in briefings.documents(self.db, self.resolve(ref, principal))]

    @translate_storage
    def document(self, ref: str, doc_id: str, *, principal: Principal | None = None) -> DocumentView:
        """One briefing document with its text and its chunks' spans (what a page shows when a
        citation is clicked); :class:`DocumentNotFound` naming ``doc_id`` when the plan has none."""
        plan_id = self.resolve(ref, principal)
        try:
            doc = briefings.document(self.db, plan_id, doc_id)
        except storage_errors.NotFound as exc:
            raise DocumentNotFound(f"plan {plan_id} has no briefing document {doc_id!r}",
                                   details=[{"field": "doc_id", "message": "no such document in this plan"}]) from exc
        return DocumentView.of(doc, briefings.chunks(self.db, plan_id, doc_id))

    @translate_storage
    def citations(self, plan_id: str, text: str) -> list[CitationView]:
        """Every ``[doc:chunk]`` citation in ``text`` (a text of plan ``plan_id``, already
        resolved for its caller), resolved against the plan's passages, in text order; one of
        a passage that does not exist is flagged ``unresolved``. No read when there is none."""
        return [CitationView.of(c) for c in cite(self.db, plan_id, text)]

    @translate_storage
    def list_events(self, plan_id: str, after: int = 0, limit: int = 1000) -> list[EventRecord]:
        return outbox.list_events(self.db, plan_id, after=after, limit=limit)

    @translate_storage
    def diff(self, a: str, b: str, *, principal: Principal | None = None) -> Comparison:
        """Plans ``a`` and ``b`` side by side (:mod:`orchestrator.plan.plan_diff`): decisions, the
        final texts' line diff, which phases each reused or ran, and cost. Both must be in
        ``principal``'s reach: another tenant's plan is not found, as on every read."""
        views, results, stored = [], [], []
        for ref in (a, b):
            view = self.view(ref, principal=principal)
            views.append(view)
            results.append(self.result_text(view.id))
            stored.append(contents.hashes(self.db, view.id))
        return compare(views[0], results[0], stored[0], views[1], results[1], stored[1])

    @translate_storage
    def get_plan(self, ref: str, *, principal: Principal | None = None) -> PlanRecord:
        return plans.get_plan(self.db, self.resolve(ref, principal))
