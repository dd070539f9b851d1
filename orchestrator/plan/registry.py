"""The operator's model registry, and the one place a plan's model name becomes a ModelSpec.

``CONCLAVE_MODELS`` names a YAML or JSON file::

    models:
      gpt:
        provider: openai
        model: gpt-4o-mini
        base_url: https://api.openai.com/v1
        api_key_env: OPENAI_API_KEY
      azure:
        provider: openai
        model: gpt-4o
        base_url: https://acme.openai.azure.com/openai/deployments/gpt-4o
        headers: {api-key: AZURE_OPENAI_KEY}      # header name -> environment variable
      default:
        provider: offline

Each entry takes the fields of a plan's ``models:`` entries plus ``headers``; a wrong
field is reported as ``CONCLAVE_MODELS (path): models.<name>.<field>: why``.

Who decides what (:class:`ModelResolver`):

* **Cluster** (a broker is configured). A plan names registry models. A plan that
  defines its own ``models:`` is refused (``models.<name>``) unless the operator set
  ``CONCLAVE_ALLOW_PLAN_MODELS``; even then its ``api_key_env`` must be listed in
  ``CONCLAVE_ALLOWED_KEY_ENVS`` (never a ``CONCLAVE_*`` variable), a network model
  must give a ``base_url`` that passes the egress policy
  (``CONCLAVE_ALLOWED_BASE_URLS``, :mod:`orchestrator.gateway.egress`), and it cannot set
  ``headers``; it is untrusted at call time (egress checked again, address pinned).
  A plan's own model shadows a registry model of the same name for that plan only,
  as in embedded mode. There is no built-in model:
  with no registry, nothing is usable and submit says so, naming ``CONCLAVE_MODELS``
  (the offline model runs only if the operator registered it).
* **Embedded** (``conclave run`` with no broker; the user is the operator). A plan's
  own models are used as written, then the registry's, then the built-in ``default``
  (``CONCLAVE_DEFAULT_PROVIDER``) for a plan that defines no models.

Submit checks a plan (:meth:`ModelResolver.check_plan`, field errors); the worker
resolves again at call time from ITS registry and settings (:meth:`ModelResolver.spec`)
and never trusts a host or a variable name because a plan was once accepted.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.core.errors import InvalidConfiguration, InvalidPlan
from orchestrator.core.settings import OWN_PREFIX, Settings
from orchestrator.gateway.credentials import unset_credentials
from orchestrator.gateway.failures import EgressRefused, ModelNotAllowed
from orchestrator.gateway.providers.offline.options import option_problems
from orchestrator.gateway.types import ModelSpec
from orchestrator.plan.field_errors import dotted, unknown_field
from orchestrator.plan.plan_text import SafeLoader, position, yaml_problem
from orchestrator.plan.schema import BoardPlan, ModelConfig, TeamPlan

Plan = BoardPlan | TeamPlan

NETWORK_PROVIDERS = frozenset({"openai", "ollama", "anthropic"})
MAX_REGISTRY_BYTES = 1_000_000
_HEADER_RE = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,100}$")
_ENV_RE = re.compile(r"^[A-Z_][A-Z0-9_]{0,99}$")
_MODEL_NAME_RE = re.compile(r"^[A-Za-z0-9_.-]{1,80}$")
#: Headers the HTTP client owns (framing, routing, hop-by-hop): never configurable.
RESERVED_HEADERS = frozenset({
    "host", "content-length", "content-type", "transfer-encoding", "connection", "keep-alive", "upgrade",
    "te", "trailer", "expect", "proxy-authorization", "proxy-connection",
})


class Price(BaseModel):
    """US dollars per million tokens, as the provider bills them, and a fee per call (a
    provider that bills each request, whatever its tokens; 0 by default)."""

    model_config = ConfigDict(extra="forbid")

    input: float = Field(ge=0, le=100_000)
    output: float = Field(ge=0, le=100_000)
    per_call: float = Field(0.0, ge=0, le=1_000)


class RegisteredModel(ModelConfig):
    """A registry entry: a plan's model fields plus ``headers`` (name -> variable) and its
    ``price`` — the operator's alone: a plan cannot say what its calls cost."""

    headers: dict[str, str] = Field(default_factory=dict, max_length=20)
    price: Price | None = None

    @field_validator("headers")
    @classmethod
    def _headers(cls, value: dict[str, str]) -> dict[str, str]:
        seen: set[str] = set()
        for header, variable in value.items():
            if not _HEADER_RE.fullmatch(header):
                raise ValueError(f"{header!r} is not a valid HTTP header name")
            if header.lower() in RESERVED_HEADERS:
                raise ValueError(f"header {header!r} is set by the HTTP client and cannot be configured")
            if header.lower() in seen:
                raise ValueError(f"header {header!r} is given twice")
            seen.add(header.lower())
            if not isinstance(variable, str) or not _ENV_RE.fullmatch(variable):
                raise ValueError(f"header {header!r}: {variable!r} is not an environment variable name "
                                 "(the value is read from that variable at call time)")
        return value


class _RegistryFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    models: dict[str, RegisteredModel] = Field(max_length=500)

    @field_validator("models")
    @classmethod
    def _names(cls, value: dict[str, RegisteredModel]) -> dict[str, RegisteredModel]:
        for name in value:
            if not _MODEL_NAME_RE.fullmatch(name):
                raise ValueError(f"model name {name!r} must be 1-80 letters, digits, '_', '.' or '-'")
        return value


def load_registry(path: Path) -> dict[str, RegisteredModel]:
    """Read and validate a registry file; raises :class:`InvalidConfiguration` naming
    the file and the field (``models.<name>.<field>``)."""
    where = f"CONCLAVE_MODELS ({path})"
    try:
        if path.stat().st_size > MAX_REGISTRY_BYTES:
            raise _invalid(where, "", f"larger than {MAX_REGISTRY_BYTES} bytes")
        data = yaml.load(path.read_text(encoding="utf-8"), Loader=SafeLoader)
    except FileNotFoundError:
        if path.is_absolute():
            raise _invalid(where, "", "cannot read it: no such file") from None
        raise _invalid(where, "", f"cannot read it: no such file in the working directory {Path.cwd()} (a relative "
                                  f"CONCLAVE_MODELS is read from where each process starts): set it to an "
                                  f"absolute path, e.g. CONCLAVE_MODELS=\"$PWD/{path}\" from the directory "
                                  f"that holds {path}") from None
    except OSError as exc:
        raise _invalid(where, "", f"cannot read it: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        problem, line, column = yaml_problem(exc)
        at = f"{position(None, line, column)}: " if line is not None else ""
        raise _invalid(where, "", f"{at}not valid YAML/JSON: {problem}") from None
    except UnicodeDecodeError as exc:
        raise _invalid(where, "", f"not valid UTF-8 (byte {exc.start})") from None
    if not isinstance(data, dict) or "models" not in data:
        raise _invalid(where, "models", "the file must be a mapping with a 'models:' mapping of named models")
    try:
        return dict(_RegistryFile.model_validate(data).models)
    except ValidationError as exc:
        details = [{"field": dotted(err["loc"]), "message": _message(err), "file": str(path)} for err in exc.errors()]
        first = details[0]
        raise InvalidConfiguration(f"{where}: {first['field']}: {first['message']}", details=details) from None


def _invalid(where: str, field: str, message: str) -> InvalidConfiguration:
    return InvalidConfiguration(f"{where}: {field + ': ' if field else ''}{message}",
                                details=[{"field": field, "message": message}])


def _message(err: Any) -> str:
    if err["type"] == "extra_forbidden":
        return unknown_field(_RegistryFile, err["loc"])
    return str(err["msg"]).removeprefix("Value error, ")


@dataclass(frozen=True)
class _Problem:
    field: str  # relative to the plan: models.<name>[.<field>]
    message: str
    egress: bool = False  # an egress refusal (llm.egress_refused) rather than a model refusal


#: a model's clocks that the operator's ceiling (``CONCLAVE_MAX_CALL_SECONDS``) bounds
CLOCKS = ("first_chunk_timeout", "idle_timeout", "deadline")


def _ceiling_problems(name: str, cfg: ModelConfig, ceiling: float) -> list[_Problem]:
    """A model whose clocks run past the operator's ceiling: it could hold a worker thread
    longer than the operator allows (a plan's, or the registry's own)."""
    return [_Problem(f"models.{name}.{clock}", f"{value:g} s is above this deployment's ceiling of {ceiling:g} s "
                                               "for one model call (CONCLAVE_MAX_CALL_SECONDS)")
            for clock in CLOCKS if (value := getattr(cfg, clock)) is not None and value > ceiling]


def _option_problems(name: str, cfg: ModelConfig, *, testing: bool) -> list[_Problem]:
    """An offline model's options out of bounds, or fault switches outside testing mode
    (``models.<name>.options.<option>``); checked again by the provider at call time."""
    if cfg.provider != "offline":
        return []
    return [_Problem(f"models.{name}.options.{option}", message)
            for option, message in option_problems(cfg.options, testing=testing)]


class ModelResolver:
    """Turns (plan, model name) into a :class:`ModelSpec` under ``settings`` and the
    operator's registry; see the module docstring for the rules."""

    def __init__(self, settings: Settings, registry: Mapping[str, RegisteredModel]) -> None:
        self.settings = settings
        self.registry = dict(registry)
        self.cluster = not settings.embedded
        self.egress = settings.egress_policy

    @classmethod
    def from_settings(cls, settings: Settings) -> ModelResolver:
        """The resolver of this process; a registry whose offline models ask for fault switches
        outside testing mode (or have bad options) refuses to start, naming the option."""
        registry = load_registry(settings.models) if settings.models is not None else {}
        for name, entry in registry.items():
            problems = _ceiling_problems(name, entry, settings.max_call_seconds)
            problems += _option_problems(name, entry, testing=settings.testing)
            if problems:
                where = f"CONCLAVE_MODELS ({settings.models})"
                details = [{"field": p.field, "message": p.message, "file": str(settings.models)} for p in problems]
                raise InvalidConfiguration(f"{where}: {problems[0].field}: {problems[0].message}", details=details)
        return cls(settings, registry)

    # ------------------------------------------------------------------ submit time

    def check_plan(self, plan: Plan, *, tenant_budget: str | None = None) -> None:
        """Refuse a plan whose models this deployment will not run (:class:`InvalidPlan`
        naming ``models.<name>[.<field>]``, ``experts[i].model`` or ``moderator.model``), and
        one that a budget in dollars could not count: under ``budget.usd``, or when its tenant
        has a monthly budget (``tenant_budget``: the tenant), every model needs a price."""
        problems = []
        for name, cfg in plan.models.items():
            refused = self._plan_model_problems(name, cfg)
            problems += refused
            if not any(p.field == f"models.{name}" for p in refused):  # a refused model's options are moot
                problems += _option_problems(name, cfg, testing=self.settings.testing)
        for field, expert in plan.named_experts():
            if expert.human:  # a person's seat calls no model
                continue
            message = self._reference_problem(plan, expert.model)
            if message is not None:
                problems.append(_Problem(f"{field}.model", message))
            for i, fallback in enumerate(expert.fallback_models):
                message = self._reference_problem(plan, fallback)
                if message is not None:
                    problems.append(_Problem(f"{field}.fallback_models[{i}]", message))
        problems += self._unpriced(plan, tenant_budget)
        if problems:
            details = [{"field": p.field, "message": p.message} for p in problems]
            raise InvalidPlan(f"invalid plan: {problems[0].field}: {problems[0].message}", details=details)

    def priced(self, plan: Plan, name: str) -> bool:
        """The model has a price: the operator's registry gives one (a plan's own models never do)."""
        entry = None if name in plan.models else self.registry.get(name)
        return entry is not None and entry.price is not None

    def _unpriced(self, plan: Plan, tenant_budget: str | None) -> list[_Problem]:
        """A budget in dollars needs a price for every model the plan may call: a model
        without one is never taken to be free."""
        if plan.budget is not None and plan.budget.usd is not None:
            names = dict.fromkeys(n for _, expert in plan.named_experts() for n in expert.models)
            unpriced = [n for n in names if not self.priced(plan, n)]
            if unpriced:
                return [_Problem("budget.usd", f"model {', '.join(map(repr, unpriced))} has no price in the "
                                               "operator's registry (price: {input, output}); a budget in dollars "
                                               "cannot count its calls, and a call is never taken to be free")]
        if tenant_budget is None:
            return []
        return [_Problem(f"{field}.model", f"model {name!r} has no price in the operator's registry, and tenant "
                                           f"{tenant_budget!r} has a monthly budget in dollars: a call is never "
                                           "taken to be free")
                for field, expert in plan.named_experts() for name in expert.models[:1]
                if not self.priced(plan, name)]

    def _reference_problem(self, plan: Plan, name: str) -> str | None:
        if name in plan.models or name in self.registry:
            return None
        if not self.cluster:
            if name == "default" and not plan.models:
                return None
            known = sorted({*plan.models, *self.registry} | (set() if plan.models else {"default"}))
            return f"unknown model {name!r} (known: {', '.join(known)})"
        if not self.registry:
            return (f"unknown model {name!r}: no model registry is configured (CONCLAVE_MODELS); "
                    "a cluster runs only models its operator registered")
        return f"unknown model {name!r} (the operator's registry has: {', '.join(sorted(self.registry))})"

    def _plan_model_problems(self, name: str, cfg: ModelConfig) -> list[_Problem]:
        """Why a plan-defined model may not run here (empty: it may)."""
        if not self.cluster:
            return []
        at = f"models.{name}"
        if not self.settings.allow_plan_models:
            registered = ", ".join(sorted(self.registry)) or "none: CONCLAVE_MODELS is not set"
            return [_Problem(at, "plans may not define models on this cluster; reference a model the operator "
                                 f"registered (registry: {registered}) — plan-defined models are off "
                                 "(CONCLAVE_ALLOW_PLAN_MODELS)")]
        problems = _ceiling_problems(name, cfg, self.settings.max_call_seconds)
        env = cfg.api_key_env
        if env is not None and env.upper().startswith(OWN_PREFIX):
            problems.append(_Problem(f"{at}.api_key_env", f"{env} is Conclave's own configuration; "
                                                           "a plan may never read it"))
        elif env is not None and env not in self.settings.allowed_key_envs:
            problems.append(_Problem(f"{at}.api_key_env", f"{env} is not a variable the operator allows plans "
                                                           "to use (CONCLAVE_ALLOWED_KEY_ENVS)"))
        if cfg.provider in NETWORK_PROVIDERS:
            if cfg.base_url is None:
                problems.append(_Problem(f"{at}.base_url", "a plan-defined model must give its base_url "
                                                            "(it must match CONCLAVE_ALLOWED_BASE_URLS)",
                                         egress=True))
            else:
                try:
                    self.egress.check(cfg.base_url)
                except EgressRefused as exc:
                    problems.append(_Problem(f"{at}.base_url", exc.message, egress=True))
        return problems

    def check_credentials(self, plan: Plan) -> None:
        """Refuse a plan whose calls THIS process would make without their credentials (embedded
        mode: the worker is this process, its environment this one): every model an expert uses
        whose ``api_key_env`` (or a configured header's variable) is unset here, as
        :class:`InvalidConfiguration` naming the model, the variable and the fields that use it.
        Variables' names only, never a value. A model that does not resolve is left to
        :meth:`check_plan`."""
        users: dict[str, list[str]] = {}
        for field, expert in plan.named_experts():
            if expert.human:
                continue
            users.setdefault(expert.model, []).append(f"{field}.model")
            for i, fallback in enumerate(expert.fallback_models):
                users.setdefault(fallback, []).append(f"{field}.fallback_models[{i}]")
        details = []
        for name, fields in users.items():
            try:
                spec = self.spec(plan, name)
            except (ModelNotAllowed, EgressRefused):
                continue
            who = ", ".join(f.removesuffix(".model") for f in fields[:4]) + (", …" if len(fields) > 4 else "")
            for unset in unset_credentials(spec):
                here = " in this environment" if unset.variable else ""
                fix = f"export {unset.variable}=… and run again" if unset.variable else f"give model {name!r} one"
                details.append({"field": fields[0], "message": f"model {name!r} needs {unset}{here}",
                                "fix": f"{fix}, or give {who} another model"})
        if details:
            first = details[0]
            more = f" ({len(details) - 1} more below)" if len(details) > 1 else ""
            raise InvalidConfiguration(f"{first['field']}: {first['message']}; {first['fix']} — nothing was "
                                       f"started{more}", details=details)

    # ------------------------------------------------------------------ call time

    def spec(self, plan: Plan, name: str) -> ModelSpec:
        """The spec a worker calls with. Re-checked now, from this process's registry and
        settings; raises :class:`ModelNotAllowed` or :class:`EgressRefused` (the phase
        fails with ``llm.model_not_allowed`` / ``llm.egress_refused``)."""
        cfg = plan.models.get(name)
        if not self.cluster:
            if cfg is not None:
                return self._build(name, cfg, trusted=True)
            if name in self.registry:
                return self._registered(name)
            if name == "default" and not plan.models:
                return self._builtin_default(name)
            raise ModelNotAllowed(f"unknown model {name!r}")
        if cfg is None:
            if name in self.registry:
                return self._registered(name)
            raise ModelNotAllowed(f"model {name!r} is not in this worker's registry (CONCLAVE_MODELS)")
        problems = self._plan_model_problems(name, cfg)
        if problems:
            first = problems[0]
            error = EgressRefused if first.egress else ModelNotAllowed
            raise error(f"model {name!r} ({first.field}): {first.message}")
        return self._build(name, cfg, trusted=False)

    def _registered(self, name: str) -> ModelSpec:
        entry = self.registry[name]
        price = (entry.price.input, entry.price.output, entry.price.per_call) if entry.price else None
        return self._build(name, entry, trusted=True, headers=entry.headers, price=price)

    def _build(self, name: str, cfg: ModelConfig, *, trusted: bool,
               headers: Mapping[str, str] | None = None, price: tuple[float, float, float] | None = None) -> ModelSpec:
        s = self.settings
        options = dict(cfg.options)
        if cfg.provider == "offline":
            options.setdefault("latency", s.offline_latency)
        return ModelSpec(
            name=name, provider=cfg.provider, model=cfg.model, base_url=cfg.base_url, api_key_env=cfg.api_key_env,
            first_chunk_timeout=cfg.first_chunk_timeout or s.first_chunk_timeout,
            idle_timeout=cfg.idle_timeout or s.idle_timeout, deadline=cfg.deadline or s.call_deadline,
            max_output_tokens=cfg.max_output_tokens or s.max_output_tokens,
            context_window=cfg.context_window or s.context_window, temperature=cfg.temperature,
            max_retries=cfg.max_retries, options=options, headers=dict(headers or {}), trusted=trusted,
            egress=None if trusted else self.egress, price=price)

    def _builtin_default(self, name: str) -> ModelSpec:
        s = self.settings
        return ModelSpec(name=name, provider=s.default_provider, first_chunk_timeout=s.first_chunk_timeout,
                         idle_timeout=s.idle_timeout, deadline=s.call_deadline,
                         max_output_tokens=s.max_output_tokens, context_window=s.context_window,
                         options={"latency": s.offline_latency}, trusted=True)
