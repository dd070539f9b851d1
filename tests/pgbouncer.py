"""A private PgBouncer in transaction pooling mode, in front of one Postgres database.

Debian's ``pgbouncer`` (``make pgbouncer`` installs it), started by a test or a benchmark on a
free 127.0.0.1 port with its own configuration, trust authentication and logs on its stderr:
each transaction of a client gets whichever server connection is free, so a client that keeps
state on a server connection across transactions (psycopg's prepared statements) breaks here
as it would behind a production PgBouncer. As root it runs as ``nobody``: PgBouncer refuses
to run as root, and reads its configuration before it switches user.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

BINARY = shutil.which("pgbouncer") or "/usr/sbin/pgbouncer"


def available() -> bool:
    return Path(BINARY).is_file() and os.access(BINARY, os.X_OK)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """``pool_mode = transaction`` with ``default_pool_size`` server connections for the one
    database of ``database_url``; :meth:`url` is that URL through it."""

    def __init__(self, database_url: str, workdir: Path, *, pool_size: int = 20) -> None:
        self.target = make_url(database_url)
        self.workdir = workdir
        self.pool_size = pool_size
        self.port = _free_port()
        self.log_path = workdir / f"pgbouncer-{self.port}.log"
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def database(self) -> str:
        return str(self.target.database)

    def url(self) -> str:
        """The database's URL, through PgBouncer."""
        return self.target.set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def config(self) -> str:
        user = self.target.username or "postgres"
        (self.workdir / "pgbouncer-users.txt").write_text(f'"{user}" ""\n')
        return "\n".join([
            "[databases]",
            f"{self.database} = host={self.target.host or '127.0.0.1'} port={self.target.port or 5432} "
            f"dbname={self.database}",
            "[pgbouncer]",
            "listen_addr = 127.0.0.1",
            f"listen_port = {self.port}",
            "unix_socket_dir =",
            "auth_type = trust",
            f"auth_file = {self.workdir / 'pgbouncer-users.txt'}",
            f"admin_users = {user}",
            "pool_mode = transaction",
            f"default_pool_size = {self.pool_size}",
            "max_client_conn = 2000",
            "stats_period = 1",
            "",
        ])

    def start(self) -> PgBouncer:
        ini = self.workdir / f"pgbouncer-{self.port}.ini"
        ini.write_text(self.config())
        cmd = [BINARY, *(["-u", "nobody"] if os.geteuid() == 0 else []), str(ini)]
        with open(self.log_path, "ab") as log:  # the child keeps its own descriptor
            self.proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"pgbouncer exited: {self.log()[-2000:]}")
            if "listening on 127.0.0.1" in self.log():
                return self
            time.sleep(0.05)
        raise RuntimeError(f"pgbouncer not listening in 15 s: {self.log()[-2000:]}")

    def show(self, what: str) -> list[dict[str, Any]]:
        """``SHOW <what>`` on the admin console (simple query protocol: the console knows no other)."""
        import psycopg

        user = self.target.username or "postgres"
        with psycopg.connect(host="127.0.0.1", port=self.port, user=user, dbname="pgbouncer", autocommit=True,
                             cursor_factory=psycopg.ClientCursor) as conn:
            cur = conn.execute(f"SHOW {what}")
            names = [d.name for d in cur.description or []]
            return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]

    def transactions(self) -> int:
        """Transactions PgBouncer has carried to the database so far."""
        return sum(int(row["total_xact_count"]) for row in self.show("STATS") if row["database"] == self.database)

    def log(self) -> str:
        return self.log_path.read_text(errors="replace") if self.log_path.exists() else ""

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
