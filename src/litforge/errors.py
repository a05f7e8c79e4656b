"""The one exception type for bad user input, reported without a traceback."""


class ConfigError(ValueError):
    """A config value, file or checkpoint the user supplied is unusable.

    The message names the key (or file) at fault and what would be valid. Entry points
    print it as one line and exit with status 2; `HYDRA_FULL_ERROR=1` shows the traceback.
    """
