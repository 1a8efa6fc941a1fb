"""Errors meant for users: the CLI prints them as one line, without a traceback."""


class UserError(Exception):
    """Bad input (config key, file, variant, dtype, device): one line that names it."""


class UnavailableError(UserError):
    """A valid request this host cannot serve (no CUDA, float16 on CPU): recorded as skipped."""
