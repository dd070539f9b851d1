"""The lexical divergence detector: a cheaper alternative to asking the lead model.

A team plan with ``divergence: lexical`` decides whether its parallel experts
disagree by reading their texts, not by a model call: each expert's stance is its
last ``Position: SUPPORT|OPPOSE|CONDITIONAL`` line (the line every expert prompt
asks for), or, when there is none, a clear majority of stance words in the text.
The experts have diverged when at least one supports and at least one opposes;
the participants of the debate are those who hold one of the two opposite views.
Conditional and unknown stances never make a divergence on their own.

It is deterministic (a pure function of the texts), costs no tokens and records
no usage. The verdict has the same shape as the model's (:class:`Verdict`), so
the debate policy does not care which detector produced it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from orchestrator.plan.debates import Verdict

STANCES = ("support", "oppose", "conditional")

_POSITION = re.compile(
    r"^[ \t>*_#-]*position[ \t*_]*:[ \t*_]*(support|oppose|conditional)\b[*_]*"
    r"[ \t]*(?:[\u2014\u2013:-]+[ \t]*)?(.*)$",
    re.I | re.M,
)
_WORDS = {
    "support": re.compile(r"\b(?:i support|i'd go ahead|we should go ahead|in favou?r|i recommend we proceed|"
                          r"i back (?:it|this|the proposal))\b", re.I),
    "oppose": re.compile(r"\b(?:i oppose|i'd hold off|we should not|against (?:it|this|the proposal)|"
                         r"i recommend against|i can't support)\b", re.I),
}


def stance_of(text: str) -> tuple[str | None, str]:
    """(stance, the sentence that states it) of one expert's text; (None, "") when unclear."""
    found = list(_POSITION.finditer(text))
    if found:
        last = found[-1]
        return last.group(1).lower(), last.group(2).strip()
    pro, con = (len(_WORDS[s].findall(text)) for s in ("support", "oppose"))
    if pro >= 2 * con + 1:
        return "support", ""
    if con >= 2 * pro + 1:
        return "oppose", ""
    return None, ""


def lexical_verdict(question: str,
                    outputs: Sequence[tuple[str, str]]) -> tuple[Verdict, dict[str, str | None]]:
    """The verdict on ``outputs`` — (expert name, full text) in plan order — and the stance
    read for each expert (None where none could be read)."""
    read = {name: stance_of(text) for name, text in outputs}
    stances = {name: stance for name, (stance, _) in read.items()}
    pro = [n for n, s in stances.items() if s == "support"]
    con = [n for n, s in stances.items() if s == "oppose"]
    if not (pro and con):
        return Verdict(diverged=False, topic=_short(question), participants=[]), stances
    participants = [n for n in stances if n in pro or n in con]
    first_pro, first_con = read[pro[0]][1], read[con[0]][1]
    crux = f"{pro[0]}: {first_pro or 'support'} / {con[0]}: {first_con or 'oppose'}"
    return Verdict(diverged=True, topic=_short(f"{_short(question, 160)} — {crux}"),
                   participants=participants), stances


def _short(text: str, limit: int = 480) -> str:
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"
