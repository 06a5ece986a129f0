"""Errors the library raises; the CLI turns them into clear messages."""


class RlwhError(Exception):
    """Base class for every error rlwh reports to the user."""


class ConfigError(RlwhError):
    """warehouse.toml or a flag holds a value rlwh cannot use."""


class SourceError(RlwhError):
    """A source file cannot be read; the message names the file and the position."""


class WarehouseBusy(RlwhError):
    """Another rlwh process is writing the warehouse."""
