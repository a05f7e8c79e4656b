"""How a new project gets litforge: from the template's git remote at the template commit,
or, when the template has no remote, from a wheel built from that commit and carried in the
project (`vendor/`). Never from a path on the generating machine.
"""

from __future__ import annotations

import re
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from litforge.scaffold import gitio
from litforge.scaffold.checks import ScaffoldError

# A remote another machine can reach: a URL (https://, ssh://, file:// for a shared
# bare repository) or scp-like `git@host:path`. A plain path names this machine's disk.
_URL = re.compile(r"^([a-z][a-z0-9+.-]*://|[\w.-]+@[\w.-]+:)")


@dataclass(frozen=True)
class Pin:
    version: str  # PEP 440: <version>.post<commits>+g<sha>, unique per template commit
    git_url: str | None  # install from here at `sha`, or None: from `wheel`
    sha: str
    wheel: tuple[str, bytes] | None  # (file name, content) carried in vendor/


def remote_url(source: Path) -> str | None:
    """The template's `origin` when another machine could clone it, else None."""
    url = str(gitio.git("remote", "get-url", "origin", cwd=source, check=False)).strip()
    return url if url and _URL.match(url) else None


def pip_url(url: str) -> str:
    """`url` as pip's requirement parser takes it after `git+`: an scp-like remote as
    ssh://, and file:///path with a host (pip 23's parser refuses an empty one)."""
    if url.startswith("file:///"):
        return "file://localhost/" + url[len("file:///") :]
    scp = re.match(r"^([\w.-]+@[\w.-]+):(?!//)(.*)$", url)
    return f"ssh://{scp[1]}/{scp[2]}" if scp else url


def build_wheel(files: dict[str, tuple[bytes, int]], version: str) -> tuple[str, bytes]:
    """litforge's wheel from the template commit's files, stamped with `version`."""
    with tempfile.TemporaryDirectory(prefix="litforge-wheel-") as tmp:
        root = Path(tmp) / "source"
        for rel, (content, mode) in files.items():
            if rel.startswith(("src/", "pyproject.toml", "README.md")):
                target = root / rel
                target.parent.mkdir(parents=True, exist_ok=True)
                target.write_bytes(content)
                target.chmod(mode & 0o777 | 0o600)
        pyproject = root / "pyproject.toml"
        text, count = re.subn(
            r'^version = "[^"]*"$',
            f'version = "{version}"',
            pyproject.read_text(),
            count=1,
            flags=re.M,
        )
        if count != 1:
            raise ScaffoldError('the template\'s pyproject.toml has no `version = "..."` line')
        pyproject.write_text(text)
        out = Path(tmp) / "dist"
        result = subprocess.run(
            [sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
             "--no-build-isolation", "-w", str(out), str(root)],
            capture_output=True, text=True,
        )  # fmt: skip
        if result.returncode != 0:
            raise ScaffoldError(
                "could not build litforge's wheel for the new project: "
                + (result.stderr.strip().splitlines() or ["pip wheel failed"])[-1]
            )
        (wheel,) = out.glob("*.whl")
        return wheel.name, wheel.read_bytes()


def pin_for(source: Path, sha: str, version: str, files: dict[str, tuple[bytes, int]]) -> Pin:
    url = remote_url(source)
    if url is not None:
        return Pin(version, url, sha, None)
    return Pin(version, None, sha, build_wheel(files, version))
