"""Puts litforge's configs (pkg://litforge.conf) on Hydra's search path.

A SearchPathPlugin, Hydra's way for a library to ship config groups: the app's own config
directory stays first, so a project's conf/ shadows any of litforge's files by name.
"""

from __future__ import annotations

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PROVIDER = "litforge"


class LitforgeSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        try:
            from litforge.conf import SEARCH_PATH
        except ImportError:  # another litforge (an older copy) shadows this one: leave it be
            return
        if not any(entry.path == SEARCH_PATH for entry in search_path.get_path()):
            search_path.append(provider=PROVIDER, path=SEARCH_PATH)
