"""Exceptions users see. Each names what failed (queue, row, key) and why, never a secret."""


class QueuelakeError(Exception):
    """Base class: the CLI turns these into a clean message and a non-zero exit."""

    # True where the message was built with its foreign text (a driver's) already redacted: the CLI
    # then removes only distinctive secrets and password fields, and leaves the words of our own text
    # whole even when a short password is one of them (queuelake.redaction says why).
    redacted: bool = False


class ConfigError(QueuelakeError):
    """The configuration file is invalid: unknown key, missing variable, bad value."""


class AddressError(QueuelakeError, ValueError):
    """A queue address cannot be parsed or is not allowed (too long, empty)."""


class HeaderError(QueuelakeError, ValueError):
    """A Headers column cannot be decoded; the drain quarantines the row with this reason."""


class TransportError(QueuelakeError):
    """The queue database refused something: missing table, bad connection, failed statement."""


class LakeError(QueuelakeError):
    """The Delta lake refused something: engine mismatch, missing table."""
