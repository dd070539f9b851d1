"""Every anchored validator reads the whole value: ``re.match`` with ``…$`` also matches
before a final newline, so ``"acme\\n"`` would pass as a tenant, a token with a newline
after it would parse, and a redirect target could carry one into a header. Each
validator below must refuse the value its own test accepts, once a newline is added."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from orchestrator.api import inputs as inp
from orchestrator.api import session
from orchestrator.api.ui.login import HOME, safe_next
from orchestrator.control.plan_query import PlanQuery
from orchestrator.core.errors import ConclaveError, InvalidConfiguration
from orchestrator.core.settings import Settings
from orchestrator.gateway.egress import EgressPolicy
from orchestrator.gateway.failures import EgressRefused
from orchestrator.gateway.providers.error_text import safe_code
from orchestrator.plan.registry import load_registry
from storage import identity

TOKEN = "conclave_0123456789abcdef_" + "A" * 43
COOKIE = f"v1.0123456789abcdef.1700000000.{'a' * 64}"


def _refuses(call: Callable[[], Any]) -> bool:
    try:
        result = call()
    except (ConclaveError, ValueError):
        return True
    return result is None


@pytest.mark.parametrize(("what", "accepts", "value"), [
    ("tenant", lambda v: identity.check_tenant(v), "acme"),
    ("principal name", lambda v: identity.check_name(v), "ci-bot"),
    ("token", lambda v: identity.principal_id_of(v), TOKEN),
    ("session cookie", lambda v: session.decode(v), COOKIE),
    ("plan reference", lambda v: inp.plan_ref(v), "my-task-1"),
    ("phase key", lambda v: inp.phase_key(v), "r1.priya"),
    ("listing label", lambda v: PlanQuery.check(label=v), "team=growth"),
    ("listing task id", lambda v: PlanQuery.check(task_id=v), "nightly-1"),
    ("upstream error code", lambda v: safe_code(v), "invalid_api_key"),
])
def test_a_trailing_newline_is_refused(what: str, accepts: Callable[[str], Any], value: str) -> None:
    assert not _refuses(lambda: accepts(value)), f"the {what} test value must be accepted"
    assert _refuses(lambda: accepts(value + "\n")), f"a {what} with a trailing newline was accepted"


def test_a_redirect_target_with_a_trailing_newline_goes_home() -> None:
    assert safe_next("/ui/plans/abc") == "/ui/plans/abc"
    assert safe_next("/ui/plans/abc\n") == HOME


def test_an_egress_host_with_a_trailing_newline_is_refused() -> None:
    policy = EgressPolicy.from_patterns(["http://10.0.0.5:8080"])
    assert policy.check("http://10.0.0.5:8080/v1")
    with pytest.raises(EgressRefused):
        policy.check("http://10.0.0.5:8080\n/v1")


def test_a_registry_name_header_or_variable_with_a_trailing_newline_is_refused(tmp_path: Any) -> None:
    def registry(name: str, header: str, variable: str) -> Any:
        path = tmp_path / "models.yaml"
        path.write_text(
            "models:\n"
            f"  {name!r}:\n"
            "    provider: openai\n"
            "    model: gpt-4o-mini\n"
            "    base_url: http://10.0.0.5:8080/v1\n"
            f"    headers: {{{header!r}: {variable!r}}}\n")
        return load_registry(path)

    assert registry("fast", "X-Team", "TEAM_HEADER")
    for bad in (("fast\n", "X-Team", "TEAM_HEADER"), ("fast", "X-Team\n", "TEAM_HEADER"),
                ("fast", "X-Team", "TEAM_HEADER\n")):
        with pytest.raises(InvalidConfiguration):
            registry(*bad)


def test_an_allowed_key_variable_with_a_trailing_newline_is_refused() -> None:
    assert Settings(allowed_key_envs=["TEAM_KEY"]).allowed_key_envs
    with pytest.raises(ValueError, match="TEAM_KEY"):
        Settings(allowed_key_envs=["TEAM_KEY\n"])
