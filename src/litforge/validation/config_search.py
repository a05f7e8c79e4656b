"""Config groups and their options as Hydra finds them: the project's conf/, litforge's own
(pkg://litforge.conf) and every `hydra.searchpath` entry (in the primary config or on the
command line; `file://` and `pkg://` alike).

Hydra warns and goes on when a search-path entry does not exist, and answers an unknown
option with a block listing its search path; litforge asks Hydra's own repository before
composing, so both become one line.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hydra import initialize_config_dir, initialize_config_module
from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.object_type import ObjectType
from hydra.errors import HydraException

from litforge.conf import SEARCH_PATH
from litforge.errors import ConfigError

# The environment variable that names a project's conf/ for entry points that are not its
# own train.py (python -m litforge.budget, notebooks); else ./conf when it exists.
CONF_ENV = "LITFORGE_CONF"


def project_conf_dir(conf_dir: str | Path | None = None) -> str | None:
    """The project's config directory as an absolute path (Hydra resolves a relative
    config_path against the calling *module*, not the working directory): `conf_dir`, else
    $LITFORGE_CONF, else ./conf; None when there is none (litforge's configs alone)."""
    chosen = conf_dir or os.environ.get(CONF_ENV) or ("conf" if Path("conf").is_dir() else None)
    if chosen is None:
        return None
    path = Path(chosen).absolute()
    if not path.is_dir():
        raise ConfigError(
            f"config directory {path} does not exist"
            + (f" (${CONF_ENV})" if not conf_dir and os.environ.get(CONF_ENV) else "")
            + "; give the project's conf/ directory"
        )
    return str(path)


def search_root(conf_dir: str | None) -> str:
    """What Hydra's primary search-path entry is: the project's conf/ or litforge's own."""
    return conf_dir if conf_dir is not None else SEARCH_PATH


_SEARCHPATH_PROVIDERS = ("hydra.searchpath in command-line", "hydra.searchpath in main")


class GroupOptions:
    """The groups and options `python {config_name}.py *overrides` composes from."""

    def __init__(self, config_name: str, overrides: list[str], conf_dir: str | None) -> None:
        self.conf_dir = conf_dir
        self.config_name = config_name
        search_path = create_config_search_path(search_root(conf_dir))
        loader = ConfigLoaderImpl(config_search_path=search_path)
        # Hydra's own reading of the search path (primary config, then command line),
        # through its private loader: Hydra 1.3 has no public API for it.
        _, self.repo = loader._parse_overrides_and_create_caching_repo(config_name, overrides)
        for source in self.repo.get_sources():
            if source.provider in _SEARCHPATH_PROVIDERS and not source.available():
                raise ConfigError(
                    f"hydra.searchpath entry {source.path} does not exist; give an existing "
                    "directory as file:///ABSOLUTE/PATH (or file://RELATIVE) or an importable "
                    "package as pkg://PACKAGE.SUBPACKAGE"
                )

    def required(self, group: str) -> bool:
        """Whether the entry config (or one it lists, as eval.yaml lists train.yaml, and
        train.yaml litforge/train.yaml) picks an option of `group` by default: Hydra then
        fails on `group=null` with a traceback."""
        return group in self._default_groups(self.config_name, set())

    def _default_groups(self, config: str, seen: set[str]) -> set[str]:
        loaded = self.repo.load_config(config) if config not in seen else None
        seen.add(config)
        groups: set[str] = set()
        defaults = (loaded.defaults_list or []) if loaded is not None else []
        for item in defaults:
            group = getattr(item, "group", None)
            if group is not None and getattr(item, "value", None) is not None:
                groups.add(group)
            elif getattr(item, "path", None) and item.path != "_self_":
                groups |= self._default_groups(item.path, seen)
        return groups

    def is_group(self, group: str) -> bool:
        return self.repo.group_exists(group)

    def options(self, group: str) -> list[str]:
        return sorted(set(self.repo.get_group_options(group, ObjectType.CONFIG)))

    def places(self, group: str) -> list[str]:
        """Where the group's options live, as a user would name them (conf/model/, ...)."""
        found = []
        for source in self.repo.get_sources():
            if source.available() and source.is_group(group):
                root = "conf" if source.path == self.conf_dir else source.full_path()
                found.append(f"{root}/{group}/")
        return found


def group_options(
    config_name: str, overrides: list[str], conf_dir: str | None
) -> GroupOptions | None:
    """GroupOptions for the command, or None when Hydra cannot parse the overrides (Hydra
    then says what is wrong with them itself)."""
    plain = [o for o in overrides if "=" in o and not o.startswith("-")]
    try:
        return GroupOptions(config_name, plain, conf_dir)
    except HydraException:
        return None


def hydra_configs(conf_dir: str | None) -> Any:
    """Hydra's compose API over the project's conf/ (None: litforge's configs alone)."""
    if conf_dir is not None:
        return initialize_config_dir(config_dir=conf_dir, version_base="1.3")
    return initialize_config_module("litforge.conf", version_base="1.3")
