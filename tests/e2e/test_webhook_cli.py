"""``conclave webhooks create | list | rotate | deliveries | delete`` as an operator runs them on
a cluster's database: the secret is printed once, on stdout, and never by another command;
an endpoint goes to the tenant of ``--tenant``; a refused URL or an unknown id exits 2 naming
the field; without the operator's key registration exits 1 saying which variable to set."""

from __future__ import annotations

import json
from pathlib import Path

from tests.e2e.test_cli import run_cli
from tests.e2e.test_tokens import env_for

KEY = "an operator key of at least 32 characters, for tests"


def test_the_webhook_commands_on_the_database(clean_db: str, tmp_path: Path) -> None:
    env = env_for(clean_db, CONCLAVE_WEBHOOK_SECRET_KEY=KEY, CONCLAVE_WEBHOOK_URLS="https://hooks.example.com")
    made = run_cli(["webhooks", "create", "https://hooks.example.com/acme", "--event", "plan_finished",
                    "--event", "awaiting_approval", "--tenant", "acme"], tmp_path, env=env)
    assert made.returncode == 0, made.stderr
    secret = made.stdout.strip()
    assert secret.startswith("whsec_") and "\n" not in secret  # stdout is the secret, nothing else
    assert "shown only now" in made.stderr and secret not in made.stderr
    listed = run_cli(["webhooks", "list", "--json"], tmp_path, env=env)
    [endpoint] = json.loads(listed.stdout)
    assert (endpoint["tenant"], endpoint["events"]) == ("acme", ["plan_finished", "awaiting_approval"])
    plain = run_cli(["webhooks", "list"], tmp_path, env=env)
    assert endpoint["id"] in plain.stdout and "https://hooks.example.com/acme" in plain.stdout

    rotated = run_cli(["webhooks", "rotate", endpoint["id"], "--keep-previous", "60", "--json"], tmp_path, env=env)
    assert rotated.returncode == 0, rotated.stderr
    assert json.loads(rotated.stdout)["secret_version"] == 2 and json.loads(rotated.stdout)["secret"] != secret
    empty = run_cli(["webhooks", "deliveries", endpoint["id"]], tmp_path, env=env)
    assert empty.returncode == 0 and "no deliveries" in empty.stderr
    for shown in (listed, plain, empty):  # no command but create and rotate prints a secret
        assert secret not in shown.stdout + shown.stderr and "whsec_" not in shown.stdout + shown.stderr
    assert secret not in rotated.stdout + rotated.stderr  # rotate prints the new one only

    refused = run_cli(["webhooks", "create", "http://169.254.169.254/", "--event", "plan_finished"], tmp_path, env=env)
    assert refused.returncode == 2 and "[webhook.invalid] url:" in refused.stderr and "metadata" in refused.stderr
    assert run_cli(["webhooks", "delete", endpoint["id"]], tmp_path, env=env).returncode == 0
    gone = run_cli(["webhooks", "delete", endpoint["id"]], tmp_path, env=env)
    assert gone.returncode == 2 and "[webhook.not_found]" in gone.stderr and "webhook_id" in gone.stderr

    off = run_cli(["webhooks", "create", "https://hooks.example.com/acme", "--event", "plan_finished"], tmp_path,
                  env=env_for(clean_db, CONCLAVE_WEBHOOK_URLS="https://hooks.example.com"))
    assert off.returncode == 1 and "[webhook.not_configured]" in off.stderr
    assert "CONCLAVE_WEBHOOK_SECRET_KEY" in off.stderr and "Traceback" not in off.stderr
