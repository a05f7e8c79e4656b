"""User-facing error types: each carries the exit status its entry point ends with.

Entry points print any `LitforgeError` as one `error: ...` line (no traceback) and exit
with its `exit_code`; `HYDRA_FULL_ERROR=1` shows the traceback instead. A capability
defines its own subclass next to its code, so the entry points know none of them.
"""

from __future__ import annotations

import re


class LitforgeError(RuntimeError):
    """A fault the user can act on; the message says what happened and what to do."""

    exit_code: int = 1
    # True: the work was cut short (a signal, a store outage) and the same command continues
    # it, so a sweep queues the trial again. False: the run itself went wrong (NaN), so a
    # sweep records the trial as failed and goes on.
    interrupts: bool = True


class ConfigError(LitforgeError, ValueError):
    """A config value, file or checkpoint the user supplied is unusable.

    The message names the key (or file) at fault and what would be valid.
    """

    exit_code = 2


# What to check when an object store refuses or does not answer (checkpoints and data).
STORE_ADVICE = (
    "Check the URL, that the bucket exists, and the credentials in the environment "
    "(AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY, AWS_ENDPOINT_URL for S3-compatible stores; "
    "GOOGLE_APPLICATION_CREDENTIALS for gs://; AZURE_STORAGE_CONNECTION_STRING for az://)"
)


def redact_url(url: str) -> str:
    """A URL without its user:password@ part, fit for a message: storage URLs may carry
    credentials."""
    return re.sub(r"//[^/@]*@", "//", url)
