"""A throwaway PgBouncer in transaction mode in front of a PostgreSQL server (tests and the soak).

Started from Debian's ``pgbouncer`` with its configuration, log and pid file in a temporary
directory, listening on 127.0.0.1 at a free port and sending every database name to the server
(``* = host=... port=...``), with trust authentication for the users it is given. The server's
own configuration is never touched. PgBouncer refuses to run as root: as root it is started with
``-u postgres`` (or ``nobody``), which owns the directory. Not part of the service: how users run
PgBouncer is in docs/clusters.md and docker/.
"""

from __future__ import annotations

import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url


def find_pgbouncer() -> str | None:
    """The pgbouncer executable (Debian installs it in /usr/sbin), or None."""
    found = shutil.which("pgbouncer")
    if found is None and Path("/usr/sbin/pgbouncer").exists():
        found = "/usr/sbin/pgbouncer"
    return found


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgBouncer:
    """One PgBouncer process; :meth:`url` routes a PostgreSQL URL through it.

    ``pool_size`` is ``default_pool_size``: the server connections per (database, user) pair, which
    is what bounds the server's connections however many clients connect.
    """

    def __init__(self, upstream_url: str, pool_size: int = 4, max_client_conn: int = 2000) -> None:
        upstream = make_url(upstream_url)
        self.upstream_host, self.upstream_port = upstream.host or "127.0.0.1", upstream.port or 5432
        self.users = sorted({upstream.username or "postgres", "postgres", "root", "hpsearch"})
        self.admin_user = upstream.username or "postgres"
        self.pool_size, self.max_client_conn = pool_size, max_client_conn
        self.port = 0
        self.dir = Path(tempfile.mkdtemp(prefix="hpsearch-pgbouncer-"))
        self.proc: subprocess.Popen[bytes] | None = None

    def config(self) -> str:
        return f"""[databases]
* = host={self.upstream_host} port={self.upstream_port}

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = {self.port}
unix_socket_dir =
auth_type = trust
auth_file = {self.dir}/userlist.txt
admin_users = {self.admin_user}
pool_mode = transaction
default_pool_size = {self.pool_size}
max_client_conn = {self.max_client_conn}
logfile = {self.dir}/pgbouncer.log
pidfile = {self.dir}/pgbouncer.pid
log_connections = 0
log_disconnections = 0
"""

    def start(self, timeout: float = 20) -> PgBouncer:
        exe = find_pgbouncer()
        if exe is None:
            raise RuntimeError("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
        self.port = free_port()
        (self.dir / "userlist.txt").write_text("".join(f'"{user}" ""\n' for user in self.users))
        ini = self.dir / "pgbouncer.ini"
        ini.write_text(self.config())
        command = [exe, str(ini)]
        if os.geteuid() == 0:  # "PgBouncer should not run as root"
            owner = next(name for name in ("postgres", "nobody") if _has_user(name))
            entry = pwd.getpwnam(owner)
            for path in (self.dir, *self.dir.iterdir()):
                os.chown(path, entry.pw_uid, entry.pw_gid)
            command = [exe, "-u", owner, str(ini)]
        # PgBouncer logs to stderr as well as to its log file: to a file too, never to a pipe nobody
        # reads, which fills (64 KB) and then blocks PgBouncer, and every client with it.
        with open(self.dir / "stderr.log", "wb") as err:
            self.proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                said = (self.dir / "stderr.log").read_text(errors="replace").strip()[-500:]
                raise RuntimeError(f"pgbouncer exited {self.proc.returncode}: {said}")
            try:
                socket.create_connection(("127.0.0.1", self.port), timeout=1).close()
                return self
            except OSError:
                time.sleep(0.05)
        self.stop()
        raise RuntimeError(f"pgbouncer did not listen on 127.0.0.1:{self.port} within {timeout:g} s")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()  # SIGTERM: PgBouncer closes its connections and exits at once
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        shutil.rmtree(self.dir, ignore_errors=True)

    def __enter__(self) -> PgBouncer:
        return self.start()

    def __exit__(self, *_exc: object) -> None:
        self.stop()

    def url(self, url: str) -> str:
        """``url`` (a PostgreSQL URL of the upstream server) pointed at this PgBouncer instead."""
        return make_url(url).set(host="127.0.0.1", port=self.port).render_as_string(hide_password=False)

    def log(self) -> str:
        path = self.dir / "pgbouncer.log"
        return path.read_text(errors="replace") if path.exists() else ""

    def show(self, what: str) -> list[dict[str, Any]]:
        """Rows of the admin console's ``SHOW <what>`` (POOLS, STATS, SERVERS, CLIENTS...)."""
        import psycopg2

        conn = psycopg2.connect(host="127.0.0.1", port=self.port, dbname="pgbouncer", user=self.admin_user)
        try:
            conn.autocommit = True  # the console takes no BEGIN
            with conn.cursor() as cur:
                cur.execute(f"SHOW {what}")
                names = [column[0] for column in cur.description or []]
                return [dict(zip(names, row, strict=True)) for row in cur.fetchall()]
        finally:
            conn.close()

    def server_connections(self, database: str) -> int:
        """Server connections PgBouncer holds to ``database`` now (active, idle, used, being tested)."""
        keys = ("sv_active", "sv_idle", "sv_used", "sv_tested", "sv_login")
        return sum(int(row.get(k) or 0) for row in self.show("POOLS") if row["database"] == database for k in keys)

    def waiting_clients(self) -> int:
        return sum(int(row.get("cl_waiting") or 0) for row in self.show("POOLS") if row["database"] != "pgbouncer")


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True
