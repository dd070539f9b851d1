"""The options of an offline model (``spec.options``): one typed, bounded model that
submit-time validation (:mod:`orchestrator.plan.registry`) and the provider both use, so
there is no second parser to disagree with the first.

The offline model is a demo, not an attack surface. Every option is bounded, and a
value out of bounds (or of the wrong type, or an unknown option) is a field error
named after the option (``options.words``). The **fault switches** make the model
misbehave on purpose, for the test suite and benchmarks:

    hang, hang_seconds, fail, break_after_chars, malformed_divergence,
    malformed_verdict, contradict_decision,
    and first_chunk_delay above DEMO_FIRST_CHUNK_DELAY seconds.

``malformed_verdict`` breaks an expert's verdict line (``"once"``: the turn's, so the
repair reply is well formed; ``"always"``: the repair's too); ``contradict_decision``
makes the chair's verdict name another answer than the decision it was given.

They are accepted only when the operator runs in testing mode (``CONCLAVE_TESTING``):
refused at submit naming the option, and refused again by the provider at call time
(:class:`~orchestrator.gateway.failures.FaultNotAllowed`), which only its own process's settings can
switch on — a stored plan never does.

``solver`` (:class:`SolverOptions`) is not a fault: a simulated solver of a plan's
``What is <expr>?`` question, with a skill, a correlation between experts, a conformity
to the peers' majority and a position bias, all bounded to [0, 1], and a seed
(:mod:`~orchestrator.gateway.providers.offline.solver`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.gateway.failures import FaultNotAllowed, ProviderMisconfigured
from orchestrator.gateway.providers.offline.text import slug_of

STANCES = ("support", "oppose", "conditional")

MAX_LATENCY = 2.0  # seconds between chunks; also the bound of CONCLAVE_OFFLINE_LATENCY
DEMO_FIRST_CHUNK_DELAY = 2.0  # a longer wait before the first chunk is a fault switch
MAX_FAULT_SECONDS = 3600.0  # the longest simulated hang or first-chunk delay (testing mode)
MAX_WORDS = 50_000  # about 300 KB of text: room for the long-result tests, not for a CPU burner
MIN_CHUNK_CHARS, MAX_CHUNK_CHARS = 4, 10_000
MAX_NAMES = 50  # experts named by hang / fail / stances

#: The options that switch a fault on when set (first_chunk_delay: when above the demo value).
FAULT_SWITCHES = ("hang", "hang_seconds", "fail", "fail_revision", "fail_kinds", "break_after_chars",
                  "malformed_divergence", "malformed_verdict", "contradict_decision", "first_chunk_delay")
MALFORMED_VERDICT = ("once", "always")  # or False
MAX_SOLVER_SEED = 2**31  # exclusive


def _stance(value: str) -> str:
    stance = value.strip().lower()
    if stance not in STANCES:
        raise ValueError(f"{value!r} is not one of {', '.join(STANCES)}")
    return stance


Stance = Annotated[str, AfterValidator(_stance)]
Name = Annotated[str, Field(min_length=1, max_length=80)]


class SolverOptions(BaseModel):
    """``options.solver``: how well the simulated experts solve the question (see
    :mod:`~orchestrator.gateway.providers.offline.solver`). ``skill`` is each expert's
    accuracy, ``correlation`` the pairwise correlation of two experts' correctness,
    ``conformity`` the chance that a later-round expert takes the peers' majority, and
    ``position_bias`` the chance that a reviewer ranks the first answer shown first."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    skill: float = Field(ge=0, le=1)
    correlation: float = Field(0.0, ge=0, le=1)
    conformity: float = Field(0.0, ge=0, le=1)
    position_bias: float = Field(0.0, ge=0, le=1)
    seed: int = Field(0, ge=0, lt=MAX_SOLVER_SEED)


class OfflineOptions(BaseModel):
    """``spec.options`` of an offline model, validated (see the module docstring)."""

    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)

    latency: float = Field(0.02, ge=0, le=MAX_LATENCY)
    first_chunk_delay: float | None = Field(None, ge=0, le=MAX_FAULT_SECONDS)  # None: latency
    chunk_chars: int = Field(24, ge=MIN_CHUNK_CHARS, le=MAX_CHUNK_CHARS)
    words: int = Field(110, ge=1, le=MAX_WORDS)
    stances: dict[Name, Stance] = Field(default_factory=dict, max_length=MAX_NAMES)  # slug -> stance
    solver: SolverOptions | None = None  # None: an expert's verdict follows its stance
    # fault switches (testing mode only)
    hang: bool | tuple[str, ...] = False  # True: everyone; else the slugs of the experts who hang
    hang_seconds: float = Field(MAX_FAULT_SECONDS, gt=0, le=MAX_FAULT_SECONDS)
    fail: bool | tuple[str, ...] = False
    fail_revision: bool = False  # a draft's revision (after a send-back) fails, every other call answers
    #: the calls of these kinds of phase fail (e.g. ``[round_summary]``), every other call answers
    fail_kinds: tuple[Literal["opening", "turn", "review", "round_summary", "final_summary", "expert", "debate",
                              "divergence", "synthesis"], ...] = Field((), max_length=9)
    break_after_chars: int | None = Field(None, ge=0, le=1_000_000)
    malformed_divergence: bool = False
    malformed_verdict: bool | str = False  # False, "once" or "always" (see _malformed)
    contradict_decision: bool = False

    @field_validator("hang", "fail", mode="before")
    @classmethod
    def _names(cls, value: Any) -> bool | tuple[str, ...]:
        """``true``, ``false``, an expert's name or a list of names (kept as slugs)."""
        if value is None or isinstance(value, bool):
            return bool(value)
        names = [value] if isinstance(value, str) else value
        if not isinstance(names, list | tuple) or not all(isinstance(n, str) and 0 < len(n) <= 80 for n in names):
            raise ValueError("must be true, false, or a list of expert names")
        if len(names) > MAX_NAMES:
            raise ValueError(f"names at most {MAX_NAMES} experts")
        return tuple(slug_of(n) for n in names)

    @field_validator("fail_kinds", mode="before")
    @classmethod
    def _kinds(cls, value: Any) -> Any:
        """A list of kinds, as YAML and JSON give it."""
        return tuple(value) if isinstance(value, list) else value

    @field_validator("malformed_verdict", mode="before")
    @classmethod
    def _malformed(cls, value: Any) -> bool | str:
        """``false``, ``"once"`` or ``"always"``; ``true`` is refused (it would not say which)."""
        if value is not False and not (isinstance(value, str) and value in MALFORMED_VERDICT):
            raise ValueError('must be "once", "always" or false')
        return value

    @field_validator("stances", mode="after")
    @classmethod
    def _slugs(cls, value: dict[str, str]) -> dict[str, str]:
        return {slug_of(name): stance for name, stance in value.items()}

    @property
    def first_delay(self) -> float:
        """Seconds before the first chunk."""
        return self.latency if self.first_chunk_delay is None else self.first_chunk_delay

    def fault_switches(self) -> list[str]:
        """The fault switches these options turn on, by option name."""
        on = [name for name in ("hang", "fail", "fail_revision", "fail_kinds", "malformed_divergence",
                                "malformed_verdict", "contradict_decision")
              if getattr(self, name)]
        if "hang_seconds" in self.model_fields_set:
            on.append("hang_seconds")
        if self.break_after_chars is not None:
            on.append("break_after_chars")
        if self.first_chunk_delay is not None and self.first_chunk_delay > DEMO_FIRST_CHUNK_DELAY:
            on.append("first_chunk_delay")
        return sorted(on, key=FAULT_SWITCHES.index)

    def hangs(self, speaker: str | None) -> bool:
        return _named(self.hang, speaker)

    def fails(self, speaker: str | None) -> bool:
        return _named(self.fail, speaker)

    @classmethod
    def parse(cls, options: Mapping[str, Any], *, testing: bool) -> OfflineOptions:
        """The options of a call, checked again by the provider at call time: raises
        :class:`ProviderMisconfigured` naming the option for a bad value, and
        :class:`FaultNotAllowed` for a fault switch outside testing mode."""
        try:
            parsed = cls.model_validate(dict(options))
        except ValidationError as exc:
            field, message = _problems(exc)[0]
            raise ProviderMisconfigured(f"offline provider: options.{field}: {message}") from None
        faults = [] if testing else parsed.fault_switches()
        if faults:
            raise FaultNotAllowed(f"offline provider: options.{faults[0]}: {_FAULT_MESSAGE}")
        return parsed


_FAULT_MESSAGE = ("a fault switch for tests, accepted only when the operator runs the API and the "
                  "workers in testing mode (CONCLAVE_TESTING)")


def option_problems(options: Mapping[str, Any], *, testing: bool) -> list[tuple[str, str]]:
    """``(option, why)`` for each problem of an offline model's options, empty when they
    may run here — what submit reports as ``models.<name>.options.<option>``."""
    try:
        OfflineOptions.model_validate(dict(options))
        problems = []
    except ValidationError as exc:
        problems = _problems(exc)
    if testing:
        return problems
    wrong = {field.split(".")[0] for field, _ in problems}
    faults = {name: options[name] for name in FAULT_SWITCHES if name in options and name not in wrong}
    return problems + [(name, _FAULT_MESSAGE) for name in OfflineOptions.model_validate(faults).fault_switches()]


def _named(value: bool | tuple[str, ...], speaker: str | None) -> bool:
    if isinstance(value, bool):
        return value
    return speaker is not None and slug_of(speaker) in value


def _problems(exc: ValidationError) -> list[tuple[str, str]]:
    out = []
    for err in exc.errors(include_url=False):
        field = ".".join(str(part) for part in err["loc"] if not str(part).startswith(("function-", "tagged-")))
        message = "unknown option" if err["type"] == "extra_forbidden" else str(err["msg"])
        out.append((field or "options", message.removeprefix("Value error, ")))
    return out
