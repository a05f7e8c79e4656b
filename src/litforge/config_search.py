"""Config groups and their options as Hydra finds them: conf/ plus every `hydra.searchpath`
entry (in the primary config or on the command line; `file://` and `pkg://` alike).

Hydra warns and goes on when a search-path entry does not exist, and answers an unknown
option with a block listing its search path; litforge asks Hydra's own repository before
composing, so both become one line.
"""

from __future__ import annotations

from pathlib import Path

from hydra._internal.config_loader_impl import ConfigLoaderImpl
from hydra._internal.utils import create_config_search_path
from hydra.core.object_type import ObjectType
from hydra.errors import HydraException

from litforge.errors import ConfigError

# conf/ at the project root. An absolute path, because Hydra resolves a relative
# config_path against the calling *module* (litforge.cli -> a `conf` package) when the
# entry point lives in a package.
CONF_DIR = str(Path(__file__).resolve().parents[2] / "conf")
_SEARCHPATH_PROVIDERS = ("hydra.searchpath in command-line", "hydra.searchpath in main")


class GroupOptions:
    """The groups and options `python {config_name}.py *overrides` composes from."""

    def __init__(self, config_name: str, overrides: list[str]) -> None:
        loader = ConfigLoaderImpl(config_search_path=create_config_search_path(CONF_DIR))
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
        """Whether train.yaml (which eval.yaml composes) picks an option of `group` by
        default: Hydra then fails on `group=null` with a traceback."""
        loaded = self.repo.load_config("train")
        defaults = loaded.defaults_list if loaded is not None else []
        return any(getattr(d, "group", None) == group and d.value is not None for d in defaults)

    def is_group(self, group: str) -> bool:
        return self.repo.group_exists(group)

    def options(self, group: str) -> list[str]:
        return sorted(set(self.repo.get_group_options(group, ObjectType.CONFIG)))

    def places(self, group: str) -> list[str]:
        """Where the group's options live, as a user would name them (conf/model/, ...)."""
        found = []
        for source in self.repo.get_sources():
            if source.available() and source.is_group(group):
                root = "conf" if source.path == CONF_DIR else source.full_path()
                found.append(f"{root}/{group}/")
        return found


def group_options(config_name: str, overrides: list[str]) -> GroupOptions | None:
    """GroupOptions for the command, or None when Hydra cannot parse the overrides (Hydra
    then says what is wrong with them itself)."""
    plain = [o for o in overrides if "=" in o and not o.startswith("-")]
    try:
        return GroupOptions(config_name, plain)
    except HydraException:
        return None
