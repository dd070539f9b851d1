"""The operator's model registry and the one resolver from (plan, model name) to a
ModelSpec: loading errors name the file and ``models.<name>.<field>``; a cluster runs
only what the operator registered or allowed; embedded mode keeps inline models."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest

from orchestrator.core.errors import InvalidConfiguration, InvalidPlan
from orchestrator.core.settings import Settings
from orchestrator.gateway.failures import EgressRefused, ModelNotAllowed
from orchestrator.plan.registry import ModelResolver, load_registry
from orchestrator.plan.schema import load_plan

CLUSTER = {"broker_url": "redis://127.0.0.1:6379/15", "database_url": "sqlite:///unused.db"}
REGISTRY = {
    "gpt": {"provider": "openai", "model": "gpt-4o-mini", "base_url": "https://api.openai.com/v1",
            "api_key_env": "OPENAI_API_KEY"},
    "azure": {"provider": "openai", "model": "gpt-4o", "base_url": "https://acme.openai.azure.com/openai/v1",
              "headers": {"api-key": "AZURE_OPENAI_KEY"}},
    "offline": {"provider": "offline"},
}
BOARD: dict[str, Any] = {
    "kind": "board", "title": "t", "question": "Should we?", "rounds": 1,
    "moderator": {"name": "Morgan", "role": "Chair", "model": "gpt"},
    "experts": [{"name": "Dana", "role": "CFO", "model": "azure"}, {"name": "Ravi", "role": "CTO", "model": "gpt"}],
}


def write(tmp_path: Path, text: str, name: str = "models.yaml") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def resolver(tmp_path: Path, registry: dict[str, Any] | None = REGISTRY, **settings: Any) -> ModelResolver:
    import yaml

    path = None if registry is None else write(tmp_path, yaml.safe_dump({"models": registry}))
    return ModelResolver.from_settings(Settings(models=path, **settings))


def plan(**changes: Any) -> Any:
    doc = copy.deepcopy(BOARD)
    doc.update(changes)
    return load_plan(doc)


def refused(r: ModelResolver, p: Any) -> InvalidPlan:
    with pytest.raises(InvalidPlan) as info:
        r.check_plan(p)
    return info.value


# ------------------------------------------------------------------ loading the file


@pytest.mark.parametrize(("text", "field", "words"), [
    ("models:\n  gpt:\n    provider: openai\n    api_key: sk-123\n", "models.gpt.api_key", "unknown field"),
    ("models:\n  gpt:\n    provider: psychic\n", "models.gpt.provider", "openai"),
    ("models:\n  gpt:\n    base_url: ftp://x\n", "models.gpt.base_url", "http"),
    ("models:\n  gpt:\n    max_retries: 99\n", "models.gpt.max_retries", "10"),
    ("models:\n  az:\n    headers: {'bad header': KEY}\n", "models.az.headers", "not a valid HTTP header name"),
    ("models:\n  az:\n    headers: {Host: KEY}\n", "models.az.headers", "set by the HTTP client"),
    ("models:\n  az:\n    headers: {Content-Length: KEY}\n", "models.az.headers", "set by the HTTP client"),
    ("models:\n  az:\n    headers: {api-key: lower_case}\n", "models.az.headers", "environment variable name"),
    ("models:\n  az:\n    headers: {api-key: KEY, API-KEY: OTHER}\n", "models.az.headers", "twice"),
    ("models:\n  'bad name!':\n    provider: offline\n", "models", "model name"),
    ("models: [gpt]\n", "models", "dictionary"),
    ("gpt:\n  provider: openai\n", "models", "'models:'"),
    ("models: {}\nextra: 1\n", "extra", "unknown field"),
    ("models: {gpt: [unclosed\n", "", "line 2, column 1: not valid YAML"),
    ("models:\n  gpt:\n    provider: openai\n    api_key_evn: K\n", "models.gpt.api_key_evn",
     "unknown field — did you mean 'api_key_env'?"),
    ("models:\n  az:\n    header: {api-key: KEY}\n", "models.az.header", "did you mean 'headers'?"),
    ("model: {}\n", "models", "'models:'"),
    ("models:\n  gpt:\n    price: {input: 1, output: 2, per_call: -0.1}\n", "models.gpt.price.per_call",
     "greater than or equal to 0"),
    ("models:\n  gpt:\n    price: {input: 1, output: 2, per_request: 0.1}\n", "models.gpt.price.per_request",
     "unknown field"),
])
def test_registry_errors_name_the_file_and_the_field(tmp_path: Path, text: str, field: str, words: str) -> None:
    path = write(tmp_path, text)
    with pytest.raises(InvalidConfiguration) as info:
        load_registry(path)
    err = info.value
    assert err.code == "config.invalid"
    assert f"CONCLAVE_MODELS ({path})" in err.message
    assert err.details[0]["field"] == field, err.details
    assert words in err.message, err.message


def test_a_missing_registry_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfiguration, match="cannot read it"):
        ModelResolver.from_settings(Settings(models=tmp_path / "nope.yaml"))


def test_json_registries_load_too(tmp_path: Path) -> None:
    path = write(tmp_path, '{"models": {"gpt": {"provider": "openai", "model": "m"}}}', "models.json")
    assert load_registry(path)["gpt"].model == "m"


# ------------------------------------------------------------------ cluster: submit time


def test_cluster_plans_reference_registry_models(tmp_path: Path) -> None:
    r = resolver(tmp_path, **CLUSTER)
    r.check_plan(plan())
    spec = r.spec(plan(), "azure")
    assert spec.trusted and spec.egress is None and dict(spec.headers) == {"api-key": "AZURE_OPENAI_KEY"}
    assert spec.base_url == REGISTRY["azure"]["base_url"]


def test_cluster_unknown_model_names_the_expert_field_and_the_registry(tmp_path: Path) -> None:
    r = resolver(tmp_path, **CLUSTER)
    err = refused(r, plan(moderator={"name": "Morgan", "role": "Chair", "model": "claude"}))
    assert [d["field"] for d in err.details] == ["moderator.model"]
    assert "azure, gpt, offline" in err.message
    err = refused(r, plan(experts=[{"name": "Dana", "role": "CFO"}]))  # "default" is not registered
    assert [d["field"] for d in err.details] == ["experts[0].model"]


def test_cluster_without_a_registry_runs_nothing_and_says_why(tmp_path: Path) -> None:
    r = resolver(tmp_path, registry=None, **CLUSTER)
    err = refused(r, load_plan({**copy.deepcopy(BOARD), "moderator": {"name": "M", "role": "Chair"},
                                "experts": [{"name": "Dana", "role": "CFO"}]}))
    assert [d["field"] for d in err.details] == ["moderator.model", "experts[0].model"]
    assert "CONCLAVE_MODELS" in err.message and "no model registry" in err.message
    with pytest.raises(ModelNotAllowed, match="CONCLAVE_MODELS"):
        r.spec(plan(), "default")


def test_cluster_refuses_plan_defined_models_by_default(tmp_path: Path) -> None:
    r = resolver(tmp_path, **CLUSTER)
    own = plan(models={"mine": {"provider": "offline"}},
               experts=[{"name": "Dana", "role": "CFO", "model": "mine"}])
    err = refused(r, own)
    assert [d["field"] for d in err.details] == ["models.mine"]
    assert "CONCLAVE_ALLOW_PLAN_MODELS" in err.message
    with pytest.raises(ModelNotAllowed, match="CONCLAVE_ALLOW_PLAN_MODELS"):  # a worker re-checks
        r.spec(own, "mine")


@pytest.mark.parametrize(("model", "field", "words"), [
    ({"provider": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "CONCLAVE_DATABASE_URL"},
     "models.m.api_key_env", "Conclave's own configuration"),
    ({"provider": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "CONCLAVE_API_TOKEN"},
     "models.m.api_key_env", "Conclave's own configuration"),
    ({"provider": "openai", "base_url": "https://api.openai.com/v1", "api_key_env": "AWS_SECRET_ACCESS_KEY"},
     "models.m.api_key_env", "CONCLAVE_ALLOWED_KEY_ENVS"),
    ({"provider": "openai", "base_url": "http://169.254.169.254/latest"}, "models.m.base_url", "metadata"),
    ({"provider": "openai", "base_url": "http://2852039166/v1"}, "models.m.base_url", "numeric host"),
    ({"provider": "openai", "base_url": "https://api.openai.com@evil.test/v1"}, "models.m.base_url", "'@'"),
    ({"provider": "openai", "base_url": "https://evil.test/v1"}, "models.m.base_url", "CONCLAVE_ALLOWED_BASE_URLS"),
    ({"provider": "ollama", "base_url": "http://127.0.0.1:11434"}, "models.m.base_url", "loopback"),
    ({"provider": "openai"}, "models.m.base_url", "must give its base_url"),
])
def test_opted_in_plan_models_stay_within_the_allowlists(tmp_path: Path, model: dict[str, Any], field: str,
                                                         words: str) -> None:
    r = resolver(tmp_path, allow_plan_models=True, allowed_key_envs=["OPENAI_API_KEY"],
                 allowed_base_urls=["https://api.openai.com/v1"], **CLUSTER)
    own = plan(models={"m": model}, experts=[{"name": "Dana", "role": "CFO", "model": "m"}])
    err = refused(r, own)
    assert [d["field"] for d in err.details] == [field], err.details
    assert words in err.message, err.message
    error = EgressRefused if field.endswith("base_url") else ModelNotAllowed
    with pytest.raises(error):  # the worker refuses again at call time
        r.spec(own, "m")


def test_opted_in_plan_models_run_untrusted_with_the_operators_egress(tmp_path: Path) -> None:
    r = resolver(tmp_path, allow_plan_models=True, allowed_key_envs=["OPENAI_API_KEY"],
                 allowed_base_urls=["https://api.openai.com/v1"], **CLUSTER)
    own = plan(models={"m": {"provider": "openai", "base_url": "https://api.openai.com/v1",
                             "api_key_env": "OPENAI_API_KEY"}},
               experts=[{"name": "Dana", "role": "CFO", "model": "m"}])
    r.check_plan(own)
    spec = r.spec(own, "m")
    assert not spec.trusted and spec.egress is not None and not spec.headers
    spec.egress.check("https://api.openai.com/v1/chat/completions")


def test_the_worker_checks_with_its_own_settings_not_the_submitters(tmp_path: Path) -> None:
    """A plan accepted by an API whose allowlist listed a host is refused by a worker
    whose operator did not list it."""
    own = plan(models={"m": {"provider": "openai", "base_url": "https://llm.partner.test/v1"}},
               experts=[{"name": "Dana", "role": "CFO", "model": "m"}])
    api = resolver(tmp_path, allow_plan_models=True, allowed_base_urls=["https://llm.partner.test"], **CLUSTER)
    api.check_plan(own)
    worker = resolver(tmp_path, allow_plan_models=True, allowed_base_urls=["https://api.openai.com"], **CLUSTER)
    with pytest.raises(EgressRefused, match="allowlist"):
        worker.spec(own, "m")


@pytest.mark.parametrize("clock", ["deadline", "first_chunk_timeout", "idle_timeout"])
def test_a_plan_model_cannot_hold_a_thread_past_the_operators_ceiling(tmp_path: Path, clock: str) -> None:
    """issue 20: a plan-defined model's clocks stay within CONCLAVE_MAX_CALL_SECONDS — refused
    at submit naming the field, and again by a worker whose ceiling is lower than the API's."""
    own = plan(models={"slow": {"provider": "offline", clock: 3600}},
               experts=[{"name": "Dana", "role": "CFO", "model": "slow"}])
    r = resolver(tmp_path, allow_plan_models=True, max_call_seconds=600, **CLUSTER)
    err = refused(r, own)
    assert [d["field"] for d in err.details] == [f"models.slow.{clock}"]
    assert "3600 s is above this deployment's ceiling of 600 s" in err.message
    assert "CONCLAVE_MAX_CALL_SECONDS" in err.message

    roomy = resolver(tmp_path, allow_plan_models=True, max_call_seconds=3600, **CLUSTER)
    roomy.check_plan(own)  # at the ceiling: accepted, and the call may take that long
    assert getattr(roomy.spec(own, "slow"), "deadline" if clock == "deadline" else clock) == 3600
    with pytest.raises(ModelNotAllowed, match="CONCLAVE_MAX_CALL_SECONDS"):  # a worker with a lower ceiling
        r.spec(own, "slow")


def test_the_registrys_own_models_stay_within_the_ceiling(tmp_path: Path) -> None:
    with pytest.raises(InvalidConfiguration) as info:
        resolver(tmp_path, {**REGISTRY, "slow": {"provider": "offline", "deadline": 86400}},
                 max_call_seconds=900, **CLUSTER)
    assert [d["field"] for d in info.value.details] == ["models.slow.deadline"]
    assert "86400 s is above this deployment's ceiling of 900 s" in info.value.message


@pytest.mark.parametrize("setting", ["call_deadline", "first_chunk_timeout", "idle_timeout"])
def test_the_default_clocks_stay_within_the_ceiling(setting: str) -> None:
    from pydantic import ValidationError

    from orchestrator.core.settings import settings_errors

    with pytest.raises(ValidationError) as info:
        Settings(max_call_seconds=900, **{setting: 1000})
    assert settings_errors(info.value) == [f"CONCLAVE_{setting.upper()}: 1000 is above CONCLAVE_MAX_CALL_SECONDS "
                                           "(900), the longest one model call may take"]


# ------------------------------------------------------------------ embedded


def test_embedded_keeps_inline_models_then_the_registry_then_the_builtin_default(tmp_path: Path) -> None:
    r = resolver(tmp_path)
    inline = plan(models={"gpt": {"provider": "openai", "base_url": "http://127.0.0.1:8000/v1"}},
                  experts=[{"name": "Dana", "role": "CFO", "model": "azure"}])
    r.check_plan(inline)
    spec = r.spec(inline, "gpt")
    assert spec.trusted and spec.base_url == "http://127.0.0.1:8000/v1"  # the user is the operator
    assert r.spec(inline, "azure").headers == {"api-key": "AZURE_OPENAI_KEY"}
    bare = load_plan({**copy.deepcopy(BOARD), "moderator": {"name": "M", "role": "Chair"},
                      "experts": [{"name": "Dana", "role": "CFO"}]})
    r.check_plan(bare)
    assert r.spec(bare, "default").provider == "offline"


def test_embedded_unknown_model_names_the_field(tmp_path: Path) -> None:
    r = resolver(tmp_path, registry=None)
    doc = plan(models={"fast": {"provider": "offline"}},
               moderator={"name": "Morgan", "role": "Chair", "model": "fast"},
               experts=[{"name": "Dana", "role": "CFO", "model": "fast"}, {"name": "Ravi", "role": "CTO",
                                                                          "model": "slow"}])
    err = refused(r, doc)
    assert [d["field"] for d in err.details] == ["experts[1].model"]
    assert "unknown model 'slow' (known: fast)" in err.message
