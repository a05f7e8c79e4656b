"""The few git operations the scaffold needs, each one `git` subprocess."""

from __future__ import annotations

import io
import os
import subprocess
import tarfile
from pathlib import Path

from litforge.scaffold.checks import ScaffoldError, require_git

# Commits the scaffold makes carry this identity when the user has none configured.
IDENTITY = {"user.name": "scaffold", "user.email": "scaffold@localhost"}


def git(
    *args: str, cwd: Path, check: bool = True, text: bool = True, env: dict | None = None
) -> str | bytes:
    """`git args` in cwd; a failure is a ScaffoldError with git's own message."""
    env = {**os.environ, "GIT_TERMINAL_PROMPT": "0", "LC_ALL": "C", **(env or {})}
    result = subprocess.run(
        [require_git(), *args], cwd=cwd, capture_output=True, text=text, env=env, check=False
    )
    if check and result.returncode != 0:
        err = result.stderr if text else result.stderr.decode(errors="replace")
        raise ScaffoldError(f"git {' '.join(args[:2])} in {cwd} failed: {err.strip()}")
    return result.stdout


def toplevel(path: Path) -> Path:
    out = git("rev-parse", "--show-toplevel", cwd=path, check=False)
    if not out:
        raise ScaffoldError(f"{path} is not in a git repository; a template must be one")
    return Path(str(out).strip())


def rev(root: Path, ref: str = "HEAD") -> str:
    """The full commit id of `ref`."""
    out = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}", cwd=root, check=False)
    if not out:
        raise ScaffoldError(f"{root}: no commit {ref!r} (a template needs at least one commit)")
    return str(out).strip()


def commit_count(root: Path, sha: str) -> int:
    return int(str(git("rev-list", "--count", sha, cwd=root)).strip())


def uncommitted(root: Path) -> list[str]:
    """Paths with uncommitted changes (tracked) or untracked, not ignored."""
    out = str(git("status", "--porcelain", "--untracked-files=all", cwd=root))
    return [line[3:] for line in out.splitlines() if line.strip()]


def tree_files(root: Path, sha: str) -> dict[str, tuple[bytes, int]]:
    """path -> (content, mode) of every file committed at `sha` (symlinks as their target)."""
    data = git("archive", "--format=tar", sha, cwd=root, text=False)
    files: dict[str, tuple[bytes, int]] = {}
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:  # type: ignore[arg-type]
        for member in tar.getmembers():
            if member.isfile():
                files[member.name] = (tar.extractfile(member).read(), member.mode)  # type: ignore[union-attr]
    return files


def has_identity(repo: Path) -> bool:
    return bool(git("config", "user.email", cwd=repo, check=False))


def commit_all(repo: Path, message: str, date: str | None = None) -> str:
    """Stage everything and commit (with a local identity when none is configured)."""
    git("add", "-A", cwd=repo)
    ident = [] if has_identity(repo) else [f"-c{k}={v}" for k, v in IDENTITY.items()]
    dates = {} if date is None else {"GIT_AUTHOR_DATE": date, "GIT_COMMITTER_DATE": date}
    git(*ident, "commit", "-q", "--allow-empty", "--no-verify", "-m", message, cwd=repo, env=dates)
    return rev(repo)


def is_dirty(repo: Path) -> bool:
    return bool(str(git("status", "--porcelain", cwd=repo)).strip())
