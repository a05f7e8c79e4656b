"""`python -m litforge.sweeps.dashboard SWEEP_DIR_OR_STORAGE [--host H] [--port P]`: a study
in optuna-dashboard (`make dashboard SWEEP=multirun/train/digits_optuna`).

SWEEP_DIR_OR_STORAGE is a sweep directory (its optuna.journal), a journal file, or a
SQLAlchemy URL (postgresql://user@host/db, the password from PGPASSWORD as for the sweep).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from litforge.errors import ConfigError
from litforge.exits import report_user_errors
from litforge.extras import missing_extra


def storage_of(where: str):  # noqa: ANN201 - an Optuna storage
    from litforge.sweeps.study import JOURNAL_NAME, storage_for

    if "://" in where:
        return storage_for(where, Path("."))
    path = Path(where)
    journal = path / JOURNAL_NAME if path.is_dir() else path
    if not journal.is_file():
        raise ConfigError(
            f"{where}: no study there; give a sweep directory (with {JOURNAL_NAME}), a journal "
            "file or a storage URL"
        )
    return storage_for(str(journal), journal.parent)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m litforge.sweeps.dashboard", description=__doc__
    )
    parser.add_argument("storage", help="sweep directory, journal file or storage URL")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8080)
    args = parser.parse_args(argv)
    with report_user_errors():
        storage = storage_of(args.storage)
        try:
            from optuna_dashboard import run_server
        except ImportError as err:
            raise ConfigError(f"optuna-dashboard: {missing_extra(err)}") from None
        print(f"optuna-dashboard on http://{args.host}:{args.port}/ (Ctrl-C ends it)", flush=True)
        run_server(storage, host=args.host, port=args.port)
    sys.exit(0)


if __name__ == "__main__":
    main()
