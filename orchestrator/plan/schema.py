"""The plan document (YAML or JSON), validated with pydantic.

Two kinds: ``board`` (a moderator and experts meeting for some rounds) and
``team`` (explicit phases with dependencies and a synthesis). Every rejection
names the field that is wrong (``experts[2].model``). Plans never carry
secrets: a model names the environment variable holding its key.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from orchestrator.briefing.entries import BriefingDocument, check_briefing
from orchestrator.core.errors import InvalidPlan
from orchestrator.deliberation.answers import AnswerSpec, ChoiceAnswer, Protocol, Review, StopWhen
from orchestrator.plan.durations import format_duration, parse_duration
from orchestrator.plan.field_errors import UNKNOWN, dotted, unknown_field
from orchestrator.plan.field_errors import FieldError as _FieldError
from orchestrator.plan.plan_text import SafeLoader as SafeLoader  # where the API and the registry find it
from orchestrator.plan.plan_text import parse_plan_text, read_plan_file, too_large
from storage.ids import as_plan_id

PROVIDERS = ("offline", "openai", "ollama", "anthropic")
ANSWER_TYPES = ("choice", "number", "text")
NAME_RE = r"^[A-Za-z][A-Za-z0-9 _.'-]{0,39}$"
ID_RE = r"^[a-z0-9][a-z0-9_-]{0,59}$"

Text = Annotated[str, Field(min_length=1, max_length=20_000)]
TASK_ID_RE = r"^[A-Za-z0-9_.:\-/]+$"
LABEL_RE = r"^[A-Za-z0-9][A-Za-z0-9_.:/=-]{0,63}$"
Label = Annotated[str, Field(pattern=LABEL_RE)]  # a client's tag, e.g. "team=growth", "q3"
MAX_LABELS = 20


def check_labels(labels: list[str]) -> list[str]:
    """Labels are a set written as a list: a repeated one is refused."""
    seen = set()
    for label in labels:
        if label in seen:
            raise ValueError(f"label {label!r} is given twice")
        seen.add(label)
    return labels


class _Strict(BaseModel):
    """Unknown fields are refused, and so are values of the wrong type: ``"rounds": true``
    or ``"rounds": "2"`` is an error naming ``rounds``, never a silent 1 or 2."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True, strict=True)


class ModelConfig(_Strict):
    provider: Literal["offline", "openai", "ollama", "anthropic"] = "offline"
    model: str = Field("", max_length=200)
    base_url: str | None = Field(None, max_length=500, pattern=r"^https?://")
    api_key_env: str | None = Field(None, pattern=r"^[A-Z_][A-Z0-9_]{0,99}$")
    first_chunk_timeout: float | None = Field(None, gt=0, le=3600)
    idle_timeout: float | None = Field(None, gt=0, le=3600)
    deadline: float | None = Field(None, gt=0, le=86400)
    max_output_tokens: int | None = Field(None, ge=16, le=200_000)
    context_window: int | None = Field(None, ge=256, le=10_000_000)
    temperature: float | None = Field(None, ge=0, le=2)
    max_retries: int = Field(3, ge=0, le=10)
    options: dict[str, Any] = Field(default_factory=dict)


class Skill(_Strict):
    """A prompt fragment. Included in full unless it explicitly asks for summary mode."""

    name: str = Field(min_length=1, max_length=80)
    text: str = Field(min_length=1, max_length=50_000)
    mode: Literal["full", "summary"] = "full"
    summary: str | None = Field(None, max_length=2_000)


#: How long a person's seat may wait for its answer, in seconds (the operator may lower the
#: ceiling: ``CONCLAVE_MAX_RESPOND_WITHIN``); a seat that gives none waits a day (or the ceiling).
RESPOND_WITHIN_MIN, RESPOND_WITHIN_MAX, RESPOND_WITHIN_DEFAULT = 60, 30 * 86400, 86400
MODEL_FIELDS = ("model", "fallback_models", "system", "skills")  # what a person's seat has no use for


class Expert(_Strict):
    name: str = Field(pattern=NAME_RE)
    role: str = Field(min_length=1, max_length=200)
    system: str = Field("", max_length=20_000)
    model: str = Field("default", max_length=80)
    #: tried in order when the model fails (after its own retries): a chair that cannot lose the run
    fallback_models: list[Annotated[str, Field(min_length=1, max_length=80)]] = Field(default_factory=list,
                                                                                       max_length=5)
    skills: list[Skill] = Field(default_factory=list, max_length=20)
    #: a person takes this seat: they answer its turns (``conclave answer``, the page, the API)
    human: bool = False
    #: how long the person has for each turn (``90s``, ``30m``, ``2h``, ``3d``): then the plan's
    #: ``missing_expert`` rule decides; stored in seconds
    respond_within: int | None = None

    @field_validator("respond_within", mode="before")
    @classmethod
    def _duration(cls, v: Any) -> Any:
        if v is None:
            return None
        seconds = parse_duration(v)
        if not RESPOND_WITHIN_MIN <= seconds <= RESPOND_WITHIN_MAX:
            raise ValueError(f"{format_duration(seconds)} is out of range: from 1m to 30d")
        return seconds

    @property
    def models(self) -> list[str]:
        """The models this expert may run, in the order they are tried (none for a person)."""
        return [] if self.human else list(dict.fromkeys([self.model, *self.fallback_models]))

    @property
    def slug(self) -> str:
        return slugify(self.name)


class Budget(_Strict):
    """What the plan may spend, over every model call of every attempt (waste included): at
    most ``max_tokens`` tokens, at most ``usd`` US dollars at the registry's prices, or both.
    Each call's worst case is reserved before the call (:mod:`storage.spend`), so no number of
    concurrent phases takes the plan past either."""

    max_tokens: int | None = Field(None, ge=1, le=1_000_000_000)
    usd: float | None = Field(None, gt=0, le=1_000_000)

    @field_validator("usd", mode="before")
    @classmethod
    def _dollars(cls, v: Any) -> Any:
        """Dollars may be written as an integer (``usd: 5``); never a string or a boolean."""
        return float(v) if isinstance(v, int) and not isinstance(v, bool) else v

    @model_validator(mode="after")
    def _some_limit(self) -> Budget:
        if self.max_tokens is None and self.usd is None:
            raise ValueError("a budget needs max_tokens, usd or both")
        return self


class TeamPhase(_Strict):
    id: str = Field(pattern=ID_RE)
    expert: str
    prompt: Text
    depends_on: list[str] = Field(default_factory=list, max_length=100)


class Synthesis(_Strict):
    expert: str
    prompt: Text = "Synthesise the team's work into one answer, citing the phase each claim comes from."
    depends_on: list[str] | None = None
    #: the synthesis is a draft until a person approves it (or sends it back once with a note)
    approve: bool = False


class Final(_Strict):
    """A board's final summary: ``approve`` makes it a draft until a person approves it (or
    sends it back once with a note)."""

    approve: bool = False


Title = Annotated[str, Field(min_length=1, max_length=300)]
MaxDebates = Annotated[int, Field(ge=0, le=10)]
#: higher first among its tenant's phases held for their share (storage.fairshare); a setting, not
#: part of what the plan is: kept out of the stored spec, changed by PATCH while the plan runs
Priority = Annotated[int, Field(ge=-2, le=2, description="-2..2, higher first within the tenant's share")]
Labels = Annotated[list[Label], Field(max_length=MAX_LABELS, description="a client's tags; no repeats")]


class _PlanBase(_Strict):
    title: Title
    task_id: str | None = Field(None, min_length=1, max_length=200, pattern=TASK_ID_RE)
    question: Text
    models: dict[str, ModelConfig] = Field(default_factory=dict, max_length=50)
    experts: list[Expert] = Field(min_length=1, max_length=24)
    max_debates: MaxDebates = 1
    priority: Priority = 0
    labels: Labels = Field(default_factory=list)
    budget: Budget | None = None
    briefing: list[BriefingDocument] = Field(default_factory=list, max_length=10_000)
    answer: AnswerSpec | None = None
    decide: Protocol = "chair"
    #: a person's seat that ends unanswered at its deadline: ``tolerate`` — what follows goes on
    #: without it and is told who was absent; ``fatal`` — the plan fails naming the seat
    missing_expert: Literal["tolerate", "fatal"] = "tolerate"

    @field_validator("models")
    @classmethod
    def _model_names(cls, v: dict[str, ModelConfig]) -> dict[str, ModelConfig]:
        for name in v:
            if not re.match(r"^[A-Za-z0-9_.-]{1,80}$", name):
                raise ValueError(f"model name {name!r} must be 1-80 letters, digits, '_', '.' or '-'")
        return v

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        return check_labels(v)

    @model_validator(mode="after")
    def _check_briefing(self) -> _PlanBase:
        problem = check_briefing(self.briefing)
        if problem:
            raise _FieldError(*problem)
        return self

    @model_validator(mode="after")
    def _check_decision(self) -> _PlanBase:
        """A protocol other than ``chair`` tallies verdicts, so it needs the plan's answer;
        Borda ranks options, so it needs a choice."""
        if self.decide != "chair" and self.answer is None:
            raise _FieldError("decide", f"{self.decide!r} tallies the experts' verdicts: declare the plan's "
                                        "answer (e.g. answer: {type: choice, options: [yes, no]})")
        if self.decide == "borda" and not isinstance(self.answer, ChoiceAnswer):
            raise _FieldError("decide", "'borda' ranks options: it needs answer.type 'choice'")
        return self

    @property
    def tallied(self) -> bool:
        """Whether the panel's answer is decided by a tally (a ``decision`` phase), not by the chair."""
        return self.answer is not None and self.decide != "chair"

    def expert(self, name: str) -> Expert:
        for e in self._all_experts():
            if e.name == name:
                return e
        raise KeyError(name)

    def _all_experts(self) -> list[Expert]:
        return list(self.experts)

    @field_validator("task_id")
    @classmethod
    def _task_id(cls, v: str | None) -> str | None:
        if v is not None and as_plan_id(v) is not None:
            raise ValueError("a task_id may not be shaped like a plan id (a UUID): plan ids and task ids "
                             "must never be confused")
        return v

    def _check_experts(self) -> None:
        """Expert names are unique; a person's seat carries no model settings and only a
        person's seat a deadline. Which models exist is decided at submit, against the
        operator's registry (:mod:`orchestrator.plan.registry`)."""
        seen: dict[str, str] = {}
        for field, e in self.named_experts():
            if e.slug in seen:
                raise _FieldError(f"{field}.name",
                                  f"expert name {e.name!r} is used twice (clashes with {seen[e.slug]!r})")
            seen[e.slug] = e.name
            if e.respond_within is not None and not e.human:
                raise _FieldError(f"{field}.respond_within", "only a person's seat has a deadline: add human: true "
                                                             "(a model's clocks are its model's settings)")
            for name in MODEL_FIELDS:  # a default (a dumped plan's) is no setting
                if e.human and getattr(e, name) != Expert.model_fields[name].get_default(call_default_factory=True):
                    raise _FieldError(f"{field}.{name}", f"a person's seat (human: true) runs no model: remove "
                                                         f"{name}")

    @property
    def people(self) -> list[Expert]:
        """The experts whose seats people take."""
        return [e for e in self.experts if e.human]

    @property
    def needs_approval(self) -> bool:
        """The plan's answer is a draft until a person approves it."""
        return False

    def named_experts(self) -> list[tuple[str, Expert]]:
        """Every expert with the field that declares it (``moderator``, ``experts[i]``)."""
        return [(f"experts[{i}]", e) for i, e in enumerate(self.experts)]


class BoardPlan(_PlanBase):
    kind: Literal["board"]
    moderator: Expert
    rounds: int = Field(2, ge=1, le=10)
    stop_when: StopWhen | None = None
    review: Review | None = None
    final: Final | None = None

    def _all_experts(self) -> list[Expert]:
        return [self.moderator, *self.experts]

    def named_experts(self) -> list[tuple[str, Expert]]:
        return [("moderator", self.moderator), *super().named_experts()]

    @property
    def needs_approval(self) -> bool:
        return self.final is not None and self.final.approve

    @model_validator(mode="after")
    def _check(self) -> BoardPlan:
        if self.moderator.human:
            raise _FieldError("moderator.human", "the moderator opens, summarises every round and writes the final "
                                                 "summary: a person cannot take that seat (to have the last word, "
                                                 "approve the final: final: {approve: true})")
        self._check_experts()
        if self.review is not None and self.answer is None:
            raise _FieldError("review", "a review ranks the experts' answers: declare the plan's answer")
        if self.review is not None and len(self.experts) < (3 if self.review.exclude_self else 2):
            raise _FieldError("review", "a review needs at least two answers to rank for each reviewer")
        if self.stop_when is not None and self.answer is None:
            raise _FieldError("stop_when", "stopping on agreement compares the experts' verdicts: declare the "
                                           "plan's answer")
        return self

    @property
    def consensus_threshold(self) -> float:
        """The share of the panel that makes a consensus (and stops the rounds early)."""
        return self.stop_when.agreement if self.stop_when is not None else 0.8


class TeamPlan(_PlanBase):
    kind: Literal["team"]
    phases: list[TeamPhase] = Field(min_length=1, max_length=200)
    synthesis: Synthesis | None = None  # None: the team ends with its decision (a tallied plan only)
    divergence: Literal["model", "lexical", "off"] = "model"

    @property
    def needs_approval(self) -> bool:
        return self.synthesis is not None and self.synthesis.approve

    @model_validator(mode="after")
    def _check(self) -> TeamPlan:
        self._check_experts()
        names = {e.name for e in self.experts}
        ids: set[str] = set()
        reserved = {"synthesis", "decision"} if self.tallied else {"synthesis"}
        for i, ph in enumerate(self.phases):
            if ph.id in ids or ph.id in reserved:
                raise _FieldError(f"phases[{i}].id", f"phase id {ph.id!r} is used twice or reserved")
            ids.add(ph.id)
            if ph.expert not in names:
                raise _FieldError(f"phases[{i}].expert", f"unknown expert {ph.expert!r}")
        for i, ph in enumerate(self.phases):
            for j, dep in enumerate(ph.depends_on):
                if dep not in ids:
                    raise _FieldError(f"phases[{i}].depends_on[{j}]", f"unknown dependency {dep!r}")
                if dep == ph.id:
                    raise _FieldError(f"phases[{i}].depends_on[{j}]", "a phase cannot depend on itself")
        if self.synthesis is None:
            if not self.tallied:
                raise _FieldError("synthesis", "a team needs a synthesis, unless it ends with a tallied decision "
                                               "(answer: and decide: vote, weighted_vote, borda or consensus)")
            if self.divergence == "model" and self.max_debates > 0:
                raise _FieldError("divergence", "a model divergence check is run by the synthesis's expert: "
                                                "with no synthesis, use divergence: lexical or off")
        else:
            if self.synthesis.expert not in names:
                raise _FieldError("synthesis.expert", f"unknown expert {self.synthesis.expert!r}")
            if self.expert(self.synthesis.expert).human:
                raise _FieldError("synthesis.expert", f"{self.synthesis.expert} is a person: the synthesis (and the "
                                                      "divergence checks its expert runs) is written by a model; to "
                                                      "have the last word, approve it: synthesis: {approve: true}")
            for j, dep in enumerate(self.synthesis.depends_on or []):
                if dep not in ids:
                    raise _FieldError(f"synthesis.depends_on[{j}]", f"unknown dependency {dep!r}")
        cycle = find_cycle({ph.id: ph.depends_on for ph in self.phases})
        if cycle:
            raise _FieldError("phases", "dependency cycle: " + " -> ".join(cycle))
        return self


PlanSpec = Annotated[BoardPlan | TeamPlan, Field(discriminator="kind")]


class _Document(BaseModel):
    plan: PlanSpec


def find_cycle(graph: dict[str, list[str]]) -> list[str] | None:
    """A dependency cycle as a path (first node repeated at the end), or None."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        stack.append(node)
        for dep in graph.get(node, []):
            if state.get(dep) == 1:
                return [*stack[stack.index(dep):], dep]
            if dep not in state and (found := visit(dep)):
                return found
        stack.pop()
        state[node] = 2
        return None

    for n in graph:
        if n not in state and (found := visit(n)):
            return found
    return None


def slugify(name: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-") or "x"


def parse_plan(data: Any) -> BoardPlan | TeamPlan:
    """Validate a plan given as a mapping (or an already-built plan object)."""
    if isinstance(data, BoardPlan | TeamPlan):
        return data
    if not isinstance(data, dict):
        raise InvalidPlan("a plan must be a mapping with a 'kind' of 'board' or 'team'",
                          details=[{"field": "", "message": f"got {type(data).__name__}"}])
    if not data:
        raise InvalidPlan("the plan is empty", details=[{"field": "", "message": "empty plan"}])
    try:
        return _Document.model_validate({"plan": data}).plan
    except ValidationError as exc:
        details = _misspelt_first([_detail(err) for err in exc.errors()])
        first = details[0]
        where = f"{first['field']}: " if first["field"] else ""
        raise InvalidPlan(f"invalid plan: {where}{first['message']}", details=details) from None


def _detail(err: Any) -> dict[str, str]:
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _FieldError):
        return {"field": ctx_error.field, "message": ctx_error.message}
    if err["type"] in ("union_tag_invalid", "union_tag_not_found") and len(err["loc"]) <= 1:
        return {"field": "kind", "message": "kind must be 'board' or 'team'"}
    if err["type"] in ("union_tag_invalid", "union_tag_not_found") and list(err["loc"])[-1] == "answer":
        return {"field": "answer.type", "message": f"type must be one of: {', '.join(ANSWER_TYPES)}"}
    loc = list(err["loc"])[1:]  # drop the "plan" wrapper
    if loc and loc[0] in ("board", "team"):
        loc = loc[1:]  # drop the discriminator tag
    loc = [part for i, part in enumerate(loc) if not (i and loc[i - 1] == "answer" and part in ANSWER_TYPES)]
    field = dotted(loc)
    msg = str(err["msg"]).removeprefix("Value error, ")
    if err["type"] == "extra_forbidden":
        msg = unknown_field(_Document, err["loc"])
        if _names_a_secret(loc[-1]) and (msg == UNKNOWN or "'api_key_env'" in msg):  # a pasted key
            msg = f"{UNKNOWN} (plans never carry keys: use api_key_env)"
    return {"field": field, "message": msg}


def _names_a_secret(name: object) -> bool:
    return str(name).lower().replace("-", "_").endswith(("key", "token", "secret", "password"))


def _misspelt_first(details: list[dict[str, str]]) -> list[dict[str, str]]:
    """A misspelt field explains the "Field required" beside it: it is named first."""
    return sorted(details, key=lambda d: "did you mean" not in d["message"])


def load_plan(source: str | Path | dict[str, Any] | BoardPlan | TeamPlan, *,
              max_bytes: int = 1_000_000) -> BoardPlan | TeamPlan:
    """Load and validate a plan from a path, a YAML/JSON string, a mapping or a plan object."""
    if isinstance(source, BoardPlan | TeamPlan | dict):
        return parse_plan(source)
    path = Path(source) if _is_path(source) else None
    text = read_plan_file(path, max_bytes) if path is not None else str(source)
    if len(text.encode()) > max_bytes:
        raise too_large(f"plan file {path}" if path is not None else "the plan", len(text.encode()), max_bytes)
    data = parse_plan_text(text, str(path) if path is not None else None)
    return parse_plan(data)


def plan_file(source: object) -> Path | None:
    """The file a plan source names (relative briefing paths resolve beside it), or None."""
    if isinstance(source, Path | str) and _is_path(source):
        return Path(source)
    return None


def _is_path(source: str | Path) -> bool:
    """A Path, or a one-line string that names a file rather than holding a plan: it
    exists, has a plan file's suffix, or has no ``key: value`` in it."""
    if isinstance(source, Path):
        return True
    if "\n" in source or source.lstrip().startswith(("{", "[")):
        return False
    try:
        exists = Path(source).exists()
    except (OSError, ValueError):  # too long or otherwise not a name a file could have
        return False
    return exists or source.endswith((".yaml", ".yml", ".json")) or ":" not in source


def dump_plan(plan: BoardPlan | TeamPlan) -> dict[str, Any]:
    data = plan.model_dump(mode="json")
    del data["priority"]  # a setting stored in its column (plans.priority), patchable: the spec never changes
    if data["briefing"]:
        data["briefing"] = [{k: v for k, v in d.items() if v is not None} for d in data["briefing"]]
    else:  # plans without a briefing keep the spec they always had
        del data["briefing"]
    # plans without people keep the spec they always had
    for expert in [*data["experts"], *([data["moderator"]] if "moderator" in data else [])]:
        if not expert["human"]:
            del expert["human"], expert["respond_within"]
        else:  # a person's seat stores no model settings (it has none to give)
            for name in MODEL_FIELDS:
                del expert[name]
    if data.get("final", "") is None:
        del data["final"]
    if data.get("synthesis") and not data["synthesis"]["approve"]:
        del data["synthesis"]["approve"]
    return data


class PlanUpdate(_Strict):
    """A ``PATCH`` of a plan: only the fields sent change. ``null`` clears ``labels``; it is
    refused for ``title``, ``max_debates`` and ``priority``, which a plan always has."""

    title: Title | None = None
    labels: Labels | None = None
    max_debates: MaxDebates | None = None
    priority: Priority | None = None


class _Patched(_Strict):
    """The patchable part of a stored plan after a patch, validated whole."""

    title: Title
    labels: Labels
    max_debates: MaxDebates
    priority: Priority

    @field_validator("labels")
    @classmethod
    def _labels(cls, v: list[str]) -> list[str]:
        return check_labels(v)


def check_update(title: str, labels: list[str], max_debates: int, patch: Any, priority: int = 0) -> dict[str, Any]:
    """The fields ``patch`` (a client's JSON object) changes, with their validated values:
    the fields sent (``model_fields_set``, so a ``null`` is told apart from an omission)
    merged over the stored ``title``, ``labels`` and ``max_debates``, and the merged whole
    validated again before anything is stored. Raises :class:`InvalidPlan` naming the field."""
    try:
        if not isinstance(patch, dict):
            raise _FieldError("body", "a PATCH body is a JSON object of the fields to change")
        update = PlanUpdate.model_validate(patch)
        sent = update.model_fields_set
        for name in sorted(sent):
            if getattr(update, name) is None and name != "labels":
                raise _FieldError(name, f"{name} cannot be null: every plan has one")
        if not sent:
            raise _FieldError("body", f"nothing to change: send one of {', '.join(PlanUpdate.model_fields)}")
        merged = {"title": title, "labels": labels, "max_debates": max_debates, "priority": priority,
                  **{k: (getattr(update, k) if getattr(update, k) is not None else []) for k in sent}}
        checked = _Patched.model_validate(merged)
    except _FieldError as exc:
        raise InvalidPlan(f"{exc.field}: {exc.message}", details=[{"field": exc.field, "message": exc.message}]
                          ) from None
    except ValidationError as exc:
        details = [_patch_detail(err) for err in exc.errors()]
        raise InvalidPlan(f"{details[0]['field']}: {details[0]['message']}", details=details) from None
    return {k: getattr(checked, k) for k in sent}


def _patch_detail(err: Any) -> dict[str, str]:
    field = dotted(err["loc"])
    msg = (unknown_field(PlanUpdate, err["loc"]) if err["type"] == "extra_forbidden"
           else str(err["msg"]).removeprefix("Value error, "))
    return {"field": field or "body", "message": msg}
