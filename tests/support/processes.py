"""Real services and operator processes for end-to-end tests: redis-server, PostgreSQL,
run_operator, celery workers. Each runs in its own process group with its output in a log file."""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import psycopg
import pytest
import redis

from localcluster.ports import free_port
from tests.support.waiting import wait_for

__all__ = ["free_port"]  # the harness's port chooser, re-exported for its callers

REPO = Path(__file__).resolve().parents[2]


def as_user(user: str | None) -> dict[str, Any]:
    """Popen arguments that run a child as ``user`` (its own groups only), or nothing."""
    if user is None:
        return {}
    entry = pwd.getpwnam(user)
    return {"user": entry.pw_uid, "group": entry.pw_gid, "extra_groups": []}


class Service:
    """A child process in its own process group, logging to ``log_path``."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        log_path: Path,
        env: dict[str, str] | None = None,
        cwd: Path = REPO,
        user: str | None = None,
    ) -> None:
        self.name, self.argv, self.log_path = name, argv, log_path
        self.env = {**os.environ, **(env or {})}
        self.cwd = cwd
        self.user = user  # run as this OS user (PostgreSQL refuses root)
        self.process: subprocess.Popen[bytes] | None = None
        # A signal that makes the process log its threads' stacks (a celery worker: SIGUSR1).
        self.stacks_signal: int | None = None

    def start(self) -> Service:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("ab") as log:
            self.process = subprocess.Popen(
                self.argv,
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=self.env,
                cwd=self.cwd,
                start_new_session=True,
                **as_user(self.user),
            )
        return self

    @property
    def pid(self) -> int:
        assert self.process is not None
        return self.process.pid

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Signals the whole group (a celery worker's pool children too) and reaps."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.process.pid, sig)
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=20)

    def stop(self) -> None:
        """SIGTERM to the main process only, as Kubernetes stops a container's PID 1 (a celery
        worker then shuts its pool down warmly, rather than its children dying mid-task); the
        group is SIGKILLed if it has not ended within 20 s, and whatever it left behind too."""
        if self.process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            self.process.terminate()
        try:
            self.process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self._say_stuck()
        self.kill(signal.SIGKILL)

    def _say_stuck(self) -> None:
        """A process that outlasts its grace is a finding, not only something to kill: said in
        its log and on stderr, with its threads' stacks when it can dump them."""
        note = f"harness: {self.name} (pid {self.pid}) did not exit within 20 s of SIGTERM\n"
        sys.stderr.write(note)
        with self.log_path.open("a") as log:
            log.write(note)
        if self.stacks_signal is not None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, self.stacks_signal)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.process.wait(timeout=3)  # time to write them

    def log(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")
        except OSError:
            return ""


DEBIAN_REDIS = "/usr/bin/redis-server"


def locate_redis_server(skip_integration: bool, candidate: str | None = None) -> str:
    """The ``redis-server`` path; fails with how to fix it, or skips when told to."""
    path = candidate if candidate is not None else shutil.which("redis-server") or DEBIAN_REDIS
    if path and os.access(path, os.X_OK):
        return path
    message = (
        f"redis-server not found (looked on PATH and at {DEBIAN_REDIS}); the Redis tests need "
        "it: apt-get install redis-server, or set HIKYO_SKIP_INTEGRATION=1 to skip"
    )
    if skip_integration:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


class RedisServer(Service):
    """A private redis-server on a free loopback port; no persistence, so a restart (stop then
    start, same port) comes back empty."""

    def __init__(self, directory: Path, binary: str = DEBIAN_REDIS) -> None:
        self.port = free_port()
        directory.mkdir(parents=True, exist_ok=True)
        super().__init__(
            "redis",
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", str(directory)],
            directory / "redis.log",
        )  # fmt: skip

    def client(self, **options: object) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, **options)  # type: ignore[arg-type]

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        super().start()
        client = redis.Redis(port=self.port, socket_timeout=1)

        def answers() -> bool:
            try:
                return bool(client.ping())
            except redis.RedisError:
                return False

        wait_for(answers, timeout=20, what="redis-server to answer PING")
        client.close()
        return self


DEBIAN_POSTGRES = "/usr/lib/postgresql/*/bin"  # Debian's layout: one bin/ per major version
POSTGRES_TOOLS = ("initdb", "postgres")
POSTGRES_TIMEOUTS = {"connect_timeout": 5, "options": "-c statement_timeout=30000"}


def _major(bindir: str) -> int:
    version = Path(bindir).parent.name
    return int(version) if version.isdigit() else 0


def locate_postgres(skip_integration: bool, candidates: list[str] | None = None) -> Path:
    """The directory with PostgreSQL's server binaries (Debian's newest major first, then
    PATH); fails with how to fix it, or skips when told to (the Redis policy)."""
    if candidates is None:
        on_path = shutil.which("initdb")
        candidates = sorted(glob.glob(DEBIAN_POSTGRES), key=_major, reverse=True)
        if on_path:
            candidates.append(str(Path(on_path).resolve().parent))
    for directory in candidates:
        if all(os.access(Path(directory) / tool, os.X_OK) for tool in POSTGRES_TOOLS):
            return Path(directory)
    message = (
        f"PostgreSQL server binaries (initdb, postgres) not found under {DEBIAN_POSTGRES} or on "
        "PATH; the scaled-mode tests need them: apt-get install postgresql, or set "
        "HIKYO_SKIP_INTEGRATION=1 to skip"
    )
    if skip_integration:
        pytest.skip(message)
    pytest.fail(message, pytrace=False)


def postgres_user() -> str | None:
    """PostgreSQL refuses to run as root: then it runs as Debian's ``postgres`` user."""
    if os.geteuid() != 0:
        return None
    try:
        pwd.getpwnam("postgres")
    except KeyError:
        pytest.fail(
            "running as root and there is no 'postgres' user to run PostgreSQL as "
            "(apt-get install postgresql creates it)",
            pytrace=False,
        )
    return "postgres"


class PostgresServer(Service):
    """A private PostgreSQL server on a free loopback port: ``initdb`` into a fresh directory,
    one database and role with a random password, no durability (a test store). ``stop``
    shuts it down (fast mode) and removes its files."""

    ROLE = DATABASE = "hikyo"

    def __init__(self, bindir: Path, host: str = "127.0.0.1", clients: str | None = None) -> None:
        """``host``: where it listens (a local node's pods need the node's address);
        ``clients``: a CIDR also let in with the password (the node's pods)."""
        self.bindir, self.port = bindir, free_port()
        self.host, self.clients = host, clients
        self.password = secrets.token_hex(16)
        # Outside pytest's tmp (mode 0700, root's), so a non-root server can use it.
        self.directory = Path(tempfile.mkdtemp(prefix="hikyo-postgres-"))
        self.data, self.sockets = self.directory / "data", self.directory / "sockets"
        super().__init__(
            "postgres",
            [str(bindir / "postgres"), "-D", str(self.data), "-p", str(self.port),
             "-k", str(self.sockets), "-c", f"listen_addresses={host}",
             "-c", "fsync=off", "-c", "synchronous_commit=off", "-c", "full_page_writes=off",
             "-c", "max_connections=200"],
            self.directory / "postgres.log",
            env={"LC_ALL": "C"},
            user=postgres_user(),
        )  # fmt: skip

    @property
    def url(self) -> str:
        """The DSN the operator's processes get (HIKYO_OPERATOR_DATABASE_URL, S8.1)."""
        return f"postgres://{self.ROLE}:{self.password}@{self.host}:{self.port}/{self.DATABASE}"

    def connect(self, dbname: str | None = None) -> psycopg.Connection[Any]:
        """A bounded connection (connect and statement timeouts), autocommit."""
        return psycopg.connect(
            host=self.host,
            port=self.port,
            user=self.ROLE,
            password=self.password,
            dbname=dbname or self.DATABASE,
            autocommit=True,
            **POSTGRES_TIMEOUTS,
        )

    def start(self) -> PostgresServer:
        self._initdb()
        super().start()

        def answers() -> bool:
            if not self.alive():
                raise AssertionError(f"postgres exited at start:\n{self.log()[-2000:]}")
            try:
                with self.connect("postgres") as connection:
                    return connection.execute("SELECT 1").fetchone() == (1,)
            except psycopg.OperationalError:
                return False

        wait_for(answers, timeout=60, what="PostgreSQL to accept connections")
        with self.connect("postgres") as connection:
            connection.execute(f"CREATE DATABASE {self.DATABASE} OWNER {self.ROLE}")
        return self

    def _initdb(self) -> None:
        password_file = self.directory / "password"
        password_file.write_text(self.password)
        self.sockets.mkdir()
        if self.user is not None:
            entry = pwd.getpwnam(self.user)
            for path in (self.directory, self.sockets, password_file):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        done = subprocess.run(
            [str(self.bindir / "initdb"), "-D", str(self.data), "-U", self.ROLE,
             f"--pwfile={password_file}", "--auth-host=scram-sha-256", "--auth-local=trust",
             "--no-sync", "--no-locale", "-E", "UTF8"],
            capture_output=True,
            text=True,
            timeout=120,
            env={**os.environ, "LC_ALL": "C"},
            cwd=self.directory,
            **as_user(self.user),
        )  # fmt: skip
        password_file.unlink()
        if done.returncode != 0:
            pytest.fail(f"initdb failed: {done.stderr.strip()[-500:]}", pytrace=False)
        if self.clients is not None:
            with (self.data / "pg_hba.conf").open("a") as hba:
                hba.write(f"host all all {self.clients} scram-sha-256\n")

    def stop(self) -> None:
        """SIGINT is PostgreSQL's fast shutdown: clients are disconnected, nothing is left."""
        self.kill(signal.SIGINT)
        shutil.rmtree(self.directory, ignore_errors=True)


_SESSION_POSTGRES: list[PostgresServer] = []


def session_postgres(skip_integration: bool) -> PostgresServer:
    """The session's one PostgreSQL server, started on first use (the ``postgres_server``
    fixture, or a scaled-mode Operator); ``stop_session_postgres`` stops it at session end."""
    if not _SESSION_POSTGRES:
        server = PostgresServer(locate_postgres(skip_integration))
        try:
            server.start()
        except BaseException:
            server.stop()  # no process or directory left behind a failed start
            raise
        _SESSION_POSTGRES.append(server)
    return _SESSION_POSTGRES[0]


def stop_session_postgres() -> None:
    while _SESSION_POSTGRES:
        _SESSION_POSTGRES.pop().stop()


def manage(*args: str) -> list[str]:
    return [sys.executable, str(REPO / "manage.py"), *args]


def celery_worker(name: str, pool: str = "threads") -> list[str]:
    """A worker as the chart runs it (its default pool: threads), or with another pool."""
    return [
        sys.executable,
        "-m",
        "celery",
        "-A",
        "workers.celery_app",
        "worker",
        "--pool",
        pool,
        "--concurrency",
        "2",
        "--loglevel",
        "INFO",
        "-n",
        f"{name}@%h",
        "--without-gossip",
        "--without-mingle",
        "--without-heartbeat",
    ]


def wait_http_ok(url: str, timeout: float = 60.0, alive=lambda: True) -> None:
    import urllib.request

    def ok() -> bool:
        if not alive():
            raise AssertionError(f"the process serving {url} exited")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    wait_for(ok, timeout=timeout, what=url)
