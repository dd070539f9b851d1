"""``conclave tokens create|list|revoke`` as an operator runs them, against Postgres; and
operator configuration that is wrong refuses to start, naming what is wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

from storage import connect, principals
from tests.conftest import ROOT
from tests.e2e.test_cli import CONCLAVE, run_cli


def env_for(database_url: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["CONCLAVE_DATABASE_URL"] = database_url
    env.update(extra)
    return env


def test_tokens_create_list_revoke_and_rotate(clean_db: str, tmp_path: Path) -> None:
    env = env_for(clean_db)
    first = run_cli(["tokens", "create", "--tenant", "acme", "--scope", "plans:read", "--scope", "plans:write",
                     "--name", "acme ci 2025"], tmp_path, env=env)
    assert first.returncode == 0, first.stderr
    old_token = first.stdout.strip()
    assert old_token.startswith("conclave_") and "\n" not in old_token  # stdout is the token, nothing else
    assert "shown only now" in first.stderr and old_token not in first.stderr
    second = run_cli(["tokens", "create", "--tenant", "acme", "--scope", "plans:write", "--json"], tmp_path, env=env)
    assert second.returncode == 0, second.stderr
    created = json.loads(second.stdout)
    new_token = created["token"]
    assert created["tenant"] == "acme" and created["scopes"] == ["plans:write"] and created["name"] == "acme token"

    db = connect(clean_db)
    try:
        old = principals.authenticate(db, old_token)
        new = principals.authenticate(db, new_token)
        assert old is not None and new is not None and old.tenant == new.tenant == "acme"  # both valid: rotation
        listed = run_cli(["tokens", "list", "--json"], tmp_path, env=env)
        assert listed.returncode == 0, listed.stderr
        rows = json.loads(listed.stdout)
        assert [r["name"] for r in rows] == ["acme ci 2025", "acme token"]
        assert old_token not in listed.stdout and new_token not in listed.stdout
        assert "hash" not in listed.stdout
        plain = run_cli(["tokens", "list"], tmp_path, env=env)
        assert old.id in plain.stdout and "active" in plain.stdout and old_token not in plain.stdout

        revoked = run_cli(["tokens", "revoke", old.id], tmp_path, env=env)
        assert revoked.returncode == 0, revoked.stderr
        assert principals.authenticate(db, old_token) is None
        assert principals.authenticate(db, new_token) == new
        after = json.loads(run_cli(["tokens", "list", "--json"], tmp_path, env=env).stdout)
        assert [r["revoked_at"] is not None for r in after] == [True, False]
    finally:
        db.dispose()


def test_tokens_refuse_bad_input_naming_the_option(clean_db: str, tmp_path: Path) -> None:
    env = env_for(clean_db)
    for args, option in ((["--tenant", "acme", "--scope", "plans:delete"], "--scope"),
                         (["--tenant", "Acme Corp", "--scope", "admin"], "--tenant")):
        out = run_cli(["tokens", "create", *args], tmp_path, env=env)
        assert out.returncode == 2 and option in out.stderr and "Traceback" not in out.stderr, out.stderr
        assert out.stdout == ""
    missing = run_cli(["tokens", "revoke", "0123456789abcdef"], tmp_path, env=env)
    assert missing.returncode == 2 and "principal.not_found" in missing.stderr
    assert json.loads(run_cli(["tokens", "list", "--json"], tmp_path, env=env).stdout) == []


def test_a_bad_model_registry_refuses_to_start(settings: Any, tmp_path: Path) -> None:
    bad = tmp_path / "models.yaml"
    bad.write_text("models:\n  gpt:\n    provider: openai\n    api_key: sk-live-123\n")
    env = {**env_for(settings.database_url), **settings.environ(), "CONCLAVE_MODELS": str(bad)}
    api = run_cli(["api", "--port", "0"], tmp_path, env=env, timeout=60)
    assert api.returncode == 2, api.stderr
    assert f"CONCLAVE_MODELS ({bad})" in api.stderr and "models.gpt.api_key" in api.stderr
    assert "Traceback" not in api.stderr and "sk-live-123" not in api.stderr
    worker = subprocess.run([sys.executable, "-m", "celery", "-A", "tasks", "worker", "--pool", "solo"],
                            cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert worker.returncode != 0 and "models.gpt.api_key" in worker.stderr, worker.stderr[-2000:]
    assert "Traceback" not in worker.stderr


def test_a_malformed_allowlist_refuses_to_start_naming_the_variable(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith("CONCLAVE_")}
    env["CONCLAVE_ALLOWED_BASE_URLS"] = "https://api.openai.com/v1,https://user@evil.test"
    out = run_cli(["run", str(ROOT / "examples" / "board.yaml")], tmp_path, env=env)
    assert out.returncode == 2 and "CONCLAVE_ALLOWED_BASE_URLS" in out.stderr and "Traceback" not in out.stderr
    env["CONCLAVE_ALLOWED_BASE_URLS"] = ""
    env["CONCLAVE_API_TOKEN_SCOPES"] = "plans:read,superuser"
    worker = subprocess.run([*CONCLAVE, "worker"], cwd=tmp_path, env={**env, "CONCLAVE_BROKER_URL": "redis://x"},
                            capture_output=True, text=True, timeout=60)
    assert worker.returncode != 0 and "CONCLAVE_API_TOKEN_SCOPES" in worker.stderr, worker.stderr[-2000:]
