"""Puts litforge's configs (pkg://litforge.conf) on Hydra's search path, after the app's
own config directory (a project's conf/ shadows any of litforge's files by name).

A SearchPathPlugin, Hydra's way for a library to ship config groups. Hydra runs every
installed plugin for every app, so this one acts only in a process that runs litforge's
entry points (`litforge.cli`: train.py, eval.py, compose(), python -m litforge.budget):
another Hydra app in the same environment, or another copy of litforge under a new name,
keeps its own search path. A plain @hydra.main app that composes litforge's groups adds
`hydra.searchpath: [pkg://litforge.conf]` to its primary config instead.
"""

from __future__ import annotations

import sys

from hydra.core.config_search_path import ConfigSearchPath
from hydra.plugins.search_path_plugin import SearchPathPlugin

PROVIDER = "litforge"
PACKAGE = "litforge"


class LitforgeSearchPath(SearchPathPlugin):
    def manipulate_search_path(self, search_path: ConfigSearchPath) -> None:
        if f"{PACKAGE}.cli" not in sys.modules:
            return
        location = f"pkg://{PACKAGE}.conf"
        if not any(entry.path == location for entry in search_path.get_path()):
            search_path.append(provider=PROVIDER, path=location)
