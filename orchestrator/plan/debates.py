"""Debate policy: read a divergence verdict and decide which debate phases to insert.

The verdict is structured JSON validated with pydantic; a malformed answer gets
one corrective retry (the phase task asks again). The debate phases are returned
as an :class:`~storage.phases.Insertion` and written in the same transaction that
completes the check — so they exist before anything is enqueued for them, a
crash cannot lose them, and the ``max_debates`` limit is enforced against the
debates already stored, never against a counter in memory.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence

from pydantic import BaseModel, Field, ValidationError

from orchestrator.plan.expand import seat
from orchestrator.plan.schema import TeamPlan, slugify
from storage import event_shapes
from storage.phases import Insertion
from storage.read_models import NewPhase, PhaseRecord


class Verdict(BaseModel):
    diverged: bool
    topic: str = Field("", max_length=500)
    participants: list[str] = Field(default_factory=list, max_length=24)


class MalformedVerdict(ValueError):
    pass


def parse_verdict(text: str) -> Verdict:
    """Parse the model's answer; tolerates a code fence or prose around one JSON object."""
    candidate = text.strip()
    fenced = re.search(r"\{.*\}", candidate, re.DOTALL)
    if fenced:
        candidate = fenced.group(0)
    try:
        return Verdict.model_validate(json.loads(candidate))
    except (json.JSONDecodeError, ValidationError) as exc:
        raise MalformedVerdict(str(exc).splitlines()[0][:200]) from None


def debate_insertion(plan: TeamPlan, check: PhaseRecord, verdict: Verdict,
                     inputs: Sequence[PhaseRecord]) -> Insertion | None:
    """Debate phases for a diverged verdict: one per participant, each answering the
    others. ``inputs`` are the check's inputs (the phases it examined among them).
    Phases that waited for the check now wait for the debate too (the repository
    rewires them under the plan's lock, and places the debates after every stored phase)."""
    examined = {p.key: p for p in inputs if p.key in check.meta.get("examines", [])}
    experts_here = {p.expert for p in examined.values() if p.expert}
    participants = [n for n in dict.fromkeys(verdict.participants) if n in experts_here]
    if not verdict.diverged or len(participants) < 2:
        return None
    group = f"debate-{check.key}"
    upstream = [check.key, *check.inputs]
    new = [
        NewPhase(key=f"{group}.{slugify(name)}", kind="debate", position=i,
                 depends_on=[check.key, *examined], expert=name, group_key=group,
                 meta=seat(plan, plan.expert(name), {"topic": verdict.topic or plan.question,
                                               "participants": participants,
                                               "opponents": [n for n in participants if n != name]}),
                 inputs=upstream)
        for i, name in enumerate(participants)
    ]
    return Insertion(phases=new, rewire=check.key,
                     event=event_shapes.debate_inserted(check=check.key, topic=verdict.topic,
                                                    participants=participants, phases=[n.key for n in new]))
