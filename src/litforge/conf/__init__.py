"""litforge's config groups (trainer, precision, callbacks, checkpoint, logger, debug, hydra)
and entry configs (litforge/train.yaml, eval.yaml), found by Hydra as pkg://litforge.conf.

hydra_plugins/litforge_conf puts this package on every Hydra app's search path, after the
app's own config directory: a project's conf/ shadows any file here by one of the same name.
"""

from pathlib import Path

SEARCH_PATH = "pkg://litforge.conf"
LIBRARY_CONF_DIR = Path(__file__).resolve().parent
