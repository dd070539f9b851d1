"""The compose file and the Procfile, checked without a Docker engine (there is none here).

``docker/docker-compose.yml`` must be valid against the Compose Specification's JSON schema
(``tests/data/compose-spec.schema.json``; where ``docker compose`` exists, its ``config`` must
accept the file too), and our own rules hold: every process runs exactly the Procfile's
command for its role, and every command the two files run is one the CLI has; what a
service depends on exists and can meet the condition; api, worker and beat have health
checks; the migration is a one-shot that api, worker and beat wait for; they reach Postgres
through PgBouncer in transaction mode with the pooler set, the migration directly; no secret is written
in the file except the local Postgres's development password; every published port is on
127.0.0.1; beat's state directory is one the image's user can write.
"""

from __future__ import annotations

import json
import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml
from click.testing import CliRunner
from honcho.environ import parse_procfile

from orchestrator.cli import cli
from tests.conftest import ROOT

COMPOSE = ROOT / "docker" / "docker-compose.yml"
DOCKERFILE = ROOT / "docker" / "Dockerfile"
PROCFILE = ROOT / "Procfile"
SCHEMA = ROOT / "tests" / "data" / "compose-spec.schema.json"
#: The one secret the compose file may hold: the local development database's password.
DEV_DATABASE_PASSWORD = "conclave"
#: Services that wait for the migration (and whose command must not migrate themselves).
MIGRATED = ("api", "worker", "beat")
CONDITIONS = {"service_started", "service_healthy", "service_completed_successfully"}
SECRET_NAME = re.compile(r"PASSWORD|TOKEN|SECRET|(^|_)KEYS?($|_)|CREDENTIAL|AUTH$", re.IGNORECASE)

_VARIABLE = re.compile(r"\$(?:\{(?P<name>[A-Za-z_][A-Za-z0-9_]*)(?:(?P<op>:?[-?])(?P<arg>[^}]*))?\}"
                       r"|(?P<bare>[A-Za-z_][A-Za-z0-9_]*))")


def interpolate(text: str, env: dict[str, str]) -> str:
    """``${VAR}``, ``${VAR:-default}``, ``${VAR-default}``, ``${VAR:?error}`` and ``$VAR``, as
    both ``sh`` (the Procfile's lines) and compose (its file) expand them."""
    def one(m: re.Match[str]) -> str:
        name = m["name"] or m["bare"]
        value, op = env.get(name), m["op"] or ""
        unset = value is None or (op.startswith(":") and value == "")
        if op.endswith("?") and unset:
            raise ValueError(f"{name} is required: {m['arg']}")
        if op.endswith("-") and unset:
            return str(m["arg"])
        return value or ""

    return _VARIABLE.sub(one, text)


def compose() -> dict[str, Any]:
    document = yaml.safe_load(COMPOSE.read_text())
    assert isinstance(document, dict)
    return document


def services() -> dict[str, dict[str, Any]]:
    return dict(compose()["services"])


def procfile() -> dict[str, str]:
    return dict(parse_procfile(PROCFILE.read_text()).processes)


def argv(command: str | list[str], env: dict[str, str] | None = None) -> list[str]:
    """A command as the process receives it, with the variables of ``env`` (default: none
    set, so every default applies)."""
    if isinstance(command, list):
        return [interpolate(part, env or {}) for part in command]
    return shlex.split(interpolate(command, env or {}))


def depends_on(service: dict[str, Any]) -> dict[str, str]:
    """A service's dependencies and their conditions (a list means ``service_started``)."""
    found = service.get("depends_on") or {}
    if isinstance(found, list):
        return dict.fromkeys(found, "service_started")
    return {name: spec.get("condition", "service_started") for name, spec in found.items()}


def strings(node: Any) -> Iterator[str]:
    if isinstance(node, str):
        yield node
    elif isinstance(node, dict):
        for key, value in node.items():
            yield str(key)
            yield from strings(value)
    elif isinstance(node, list):
        for value in node:
            yield from strings(value)


def environment(service: dict[str, Any]) -> dict[str, Any]:
    env = service.get("environment") or {}
    if isinstance(env, list):
        return dict(item.split("=", 1) if "=" in item else (item, None) for item in env)
    return dict(env)


def dockerfile_env() -> dict[str, str]:
    """The ``ENV`` of the Dockerfile (``KEY=value`` pairs, continued lines joined)."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    env: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("ENV "):
            for pair in shlex.split(line[4:]):
                key, _, value = pair.partition("=")
                env[key] = value
    return env


def test_the_compose_file_is_valid_against_the_compose_specification() -> None:
    validator = jsonschema.Draft7Validator(json.loads(SCHEMA.read_text()),
                                           format_checker=jsonschema.FormatChecker())
    problems = [f"{e.json_path}: {e.message}" for e in validator.iter_errors(compose())]
    assert problems == []
    broken = compose()
    broken["services"]["api"]["depends_on"] = {"migrate": {"condition": "service_finished"}}
    broken["services"]["worker"]["healthcheck"]["tset"] = broken["services"]["worker"]["healthcheck"].pop("test")
    assert {e.json_path for e in validator.iter_errors(broken)} >= {
        "$.services.api.depends_on", "$.services.worker.healthcheck"}  # the schema does reject
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        checked = subprocess.run(["docker", "compose", "-f", str(COMPOSE), "config", "--quiet"],
                                 capture_output=True, text=True, timeout=60)
        assert checked.returncode == 0, checked.stderr


def test_every_process_runs_the_procfiles_command_for_its_role() -> None:
    roles, found = procfile(), services()
    assert set(roles) == {"api", "worker", "beat", "flower"}
    for role, line in roles.items():
        assert role in found, f"the Procfile's {role} has no compose service"
        assert argv(found[role]["command"]) == argv(line), role
    ours = {name for name, s in found.items() if s.get("image") == "conclave:local" or "build" in s}
    assert ours == {*roles, "migrate"}  # nothing of ours runs a command the Procfile does not know
    assert argv(roles["api"], {"PORT": "5000"})[-2:] == ["--port", "5000"]  # honcho hands the API its port


def test_every_command_the_files_run_is_one_the_cli_has() -> None:
    commands = [argv(line) for line in procfile().values()]
    for service in services().values():
        if "command" in service:
            commands.append(argv(service["command"]))
        test = (service.get("healthcheck") or {}).get("test")
        if isinstance(test, list) and test[0] == "CMD" and test[1] == "conclave":
            commands.append(test[1:])
    ours = [c for c in commands if c[0] == "conclave"]
    assert len(ours) >= 7
    for command in ours:
        # --help after the arguments: click still parses them first, so an unknown command,
        # option or choice fails here
        result = CliRunner().invoke(cli, [*command[1:], "--help"])
        assert result.exit_code == 0, (command, result.output)


def test_what_a_service_depends_on_exists_and_can_meet_the_condition() -> None:
    found = services()
    for name, service in found.items():
        for target, condition in depends_on(service).items():
            assert target in found, f"{name} depends on {target}, which is not a service"
            assert condition in CONDITIONS, (name, target, condition)
            if condition == "service_healthy":
                check = found[target].get("healthcheck") or {}
                assert check.get("test") and not check.get("disable"), f"{target} has no health check"
            if condition == "service_completed_successfully":
                assert found[target].get("restart") == "no", f"{target} is restarted, so it never completes"
    order: list[str] = []
    while len(order) < len(found):  # a start order exists: no cycle
        ready = [n for n, s in found.items() if n not in order and set(depends_on(s)) <= set(order)]
        assert ready, f"a dependency cycle among {sorted(set(found) - set(order))}"
        order += ready


def test_the_migration_is_a_one_shot_that_api_worker_and_beat_wait_for() -> None:
    found = services()
    migrate = found["migrate"]
    assert argv(migrate["command"]) == ["conclave", "db", "upgrade"]
    assert migrate["restart"] == "no" and "ports" not in migrate and "healthcheck" not in migrate
    assert depends_on(migrate) == {"postgres": "service_healthy"}
    for name in MIGRATED:
        assert depends_on(found[name]).get("migrate") == "service_completed_successfully", name
    for name, service in found.items():
        if name != "migrate":
            assert "upgrade" not in " ".join(strings(service.get("command", ""))), f"{name} migrates"


def test_api_worker_and_beat_have_health_checks_that_ask_the_process() -> None:
    found = services()
    for name in ("api", "worker", "beat"):
        check = found[name].get("healthcheck") or {}
        assert check.get("test") and not check.get("disable"), name
    assert "/readyz" in " ".join(found["api"]["healthcheck"]["test"])
    assert found["worker"]["healthcheck"]["test"] == ["CMD", "conclave", "health", "worker"]
    assert found["beat"]["healthcheck"]["test"] == ["CMD", "conclave", "health", "beat"]


def test_no_secret_is_written_in_the_compose_file_but_the_dev_database_password() -> None:
    for name, service in services().items():
        for key, value in environment(service).items():
            if not SECRET_NAME.search(key) or value is None:
                continue
            if (name, key) == ("postgres", "POSTGRES_PASSWORD"):
                assert value == DEV_DATABASE_PASSWORD
                continue
            # a secret may only come from the operator's shell: ${VAR} with no default
            assert re.fullmatch(r"\$\{[A-Za-z_][A-Za-z0-9_]*(:?\?[^}]*)?\}", str(value)), (name, key)
    for text in strings(compose()):
        for password, host in re.findall(r"://[^:/@\s]*:([^@/\s]*)@([^:/\s]+)", text):
            assert password == DEV_DATABASE_PASSWORD and host in ("postgres", "pgbouncer"), text  # the dev database
    assert not [key for key in dockerfile_env() if SECRET_NAME.search(key)]


def test_api_worker_and_beat_reach_postgres_through_pgbouncer_in_transaction_mode() -> None:
    """The fleet's statements go through PgBouncer, with the pooler set (no prepared statements);
    the migration, one long transaction, goes to Postgres itself."""
    found = services()
    bouncer = environment(found["pgbouncer"])
    assert bouncer["POOL_MODE"] == "transaction" and "@postgres:5432/" in bouncer["DATABASE_URL"]
    for name in (*MIGRATED, "flower"):
        env = environment(found[name])
        assert "@pgbouncer:6432/" in env["CONCLAVE_DATABASE_URL"] and env["CONCLAVE_DATABASE_POOLER"] == "pgbouncer"
    for name in MIGRATED:
        assert "pgbouncer" in depends_on(found[name]), name
    migrate = environment(found["migrate"])
    assert "@postgres:5432/" in migrate["CONCLAVE_DATABASE_URL"] and migrate["CONCLAVE_DATABASE_POOLER"] == "none"


def test_published_ports_are_on_loopback_only() -> None:
    published = 0
    for name, service in services().items():
        for port in service.get("ports") or []:
            published += 1
            if isinstance(port, dict):
                assert port.get("host_ip") == "127.0.0.1", (name, port)
            else:
                assert re.fullmatch(r"127\.0\.0\.1:\d+:\d+(/tcp|/udp)?", str(port)), (name, port)
    assert published >= 2  # the API and Flower


@pytest.mark.parametrize("name", ["beat", "worker", "api", "migrate", "flower"])
def test_the_state_directory_is_one_the_images_user_owns(name: str) -> None:
    state = dockerfile_env()["CONCLAVE_STATE_DIR"]
    service = services()[name]
    assert environment(service)["CONCLAVE_STATE_DIR"] == state
    text = DOCKERFILE.read_text()
    assert re.search(r'install -d -o conclave -g conclave [^\n]*"\$CONCLAVE_STATE_DIR"', text)
    assert re.search(r"^USER conclave$", text, re.MULTILINE)
    workdir = re.search(r"^WORKDIR (\S+)$", text, re.MULTILINE)
    assert workdir and not Path(state).is_relative_to(workdir[1])  # never the working directory
    if name == "beat":
        assert f"beat-state:{state}" in service["volumes"]  # the schedule outlives the container
