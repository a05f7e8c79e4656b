"""A throwaway PostgreSQL server on 127.0.0.1 for the sweep tests: `initdb` + `pg_ctl` from
the machine's PostgreSQL (on PATH or under /usr/lib/postgresql/*/bin), run as `nobody`
when the tests run as root (postgres refuses root). A user with a password, so the tests
can check that it never shows."""

from __future__ import annotations

import glob
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from tests.s3server import free_port

USER, PASSWORD, DATABASE = "sweeper", "pg-s3cret-pw", "optuna"


@dataclass(frozen=True)
class Server:
    url: str  # without the password: it comes from PGPASSWORD
    env: dict[str, str]


def server_bin() -> Path | None:
    """The directory of initdb, pg_ctl and psql, or None where PostgreSQL is not installed."""
    found = shutil.which("initdb")
    if found:
        return Path(found).parent
    candidates = sorted(glob.glob("/usr/lib/postgresql/*/bin/initdb"))
    return Path(candidates[-1]).parent if candidates else None


def _as_server_user(command: list[str]) -> list[str]:
    if os.geteuid() != 0:
        return command
    return ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", *command]


@contextmanager
def running() -> Iterator[Server]:
    """A server with database `optuna` owned by `sweeper` (password in PGPASSWORD), its files
    in a fresh directory the server's user can reach (pytest's are root's own, mode 700)."""
    bin_dir = server_bin()
    assert bin_dir is not None
    root = Path(tempfile.mkdtemp(prefix="litforge-pg-"))
    data, sock = root / "data", root / "sock"
    sock.mkdir()
    pwfile = root / "pw"
    pwfile.write_text(PASSWORD + "\n")
    if os.geteuid() == 0:
        root.chmod(0o755)
        for path in (root, sock, pwfile):
            os.chown(path, 65534, 65534)
    port = free_port()

    def run(*command: str) -> None:
        subprocess.run(_as_server_user(list(command)), check=True, capture_output=True, cwd=root)

    run(str(bin_dir / "initdb"), "-D", str(data), "-U", USER, f"--pwfile={pwfile}",
        "--auth=scram-sha-256", "-E", "UTF8")  # fmt: skip
    run(str(bin_dir / "pg_ctl"), "-D", str(data), "-w", "-l", str(root / "log"), "-o",
        f"-p {port} -k {sock} -c listen_addresses=127.0.0.1", "start")  # fmt: skip
    env = {**os.environ, "PGPASSWORD": PASSWORD}
    try:
        subprocess.run(
            [shutil.which("createdb") or str(bin_dir / "createdb"), "-h", "127.0.0.1", "-p",
             str(port), "-U", USER, DATABASE],
            check=True, capture_output=True, env=env,
        )  # fmt: skip
        yield Server(f"postgresql://{USER}@127.0.0.1:{port}/{DATABASE}", {"PGPASSWORD": PASSWORD})
    finally:
        run(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "stop")
        shutil.rmtree(root, ignore_errors=True)
