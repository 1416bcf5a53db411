"""The exceptions the halite SDK raises.

Every error is a :class:`HaliteError`. Errors the master answered with are
:class:`MasterError` subclasses named after the protocol's error kinds, and also
derive from the matching built-in exception where one fits (``NotFound`` is a
``LookupError``, ``Forbidden`` a ``PermissionError``, ...), so code can catch
either.
"""

from __future__ import annotations

from typing import Optional


class HaliteError(Exception):
    """Any failure of a halite call."""

    #: The master's error kind (``"not_found"``, ``"forbidden"``, ...), for
    #: errors the master answered with; ``None`` otherwise.
    kind: Optional[str] = None

    def __init__(self, message: str, kind: Optional[str] = None) -> None:
        super().__init__(message)
        self.message = message
        if kind is not None:
            self.kind = kind


class ConfigError(HaliteError, ValueError):
    """Local configuration: a config file, a key file, a missing option."""


class InvalidArgument(HaliteError, ValueError, TypeError):
    """An argument of a call that cannot be right (a bad target type, a negative
    timeout, a key that is not 64 hex digits, a value that is not JSON); nothing
    was sent. Also a ``ValueError`` and a ``TypeError``, which such mistakes
    raise elsewhere."""


class ConnectError(HaliteError, ConnectionError):
    """No master could be reached, or the handshake failed (wrong master key,
    unknown principal)."""

    #: The address that failed.
    addr: Optional[str] = None


class DisconnectedError(HaliteError, ConnectionError):
    """The connection was lost while a call was in flight, or the client or
    subscription was closed. With reconnect on (the default), the client
    connects again by itself: later calls work once it has."""


class ProtocolError(HaliteError):
    """The master sent something this SDK cannot use."""


class RequestTimeout(HaliteError, TimeoutError):
    """The master did not answer in time (the request may or may not have been
    carried out: read back before retrying a publish)."""


class MasterError(HaliteError):
    """The master refused or failed a request; :attr:`kind` says why."""


class BadRequest(MasterError, ValueError):
    """The request was invalid (a bad target, tag, argument or state)."""

    kind = "bad_request"


class Forbidden(MasterError, PermissionError):
    """This principal may not do that."""

    kind = "forbidden"


class NotFound(MasterError, LookupError):
    """The job, minion, config or deployment does not exist (or this principal
    may not see it)."""

    kind = "not_found"


class UnknownFunction(MasterError):
    """The function is not in the minion's registry or not allowed by its policy."""

    kind = "unknown_function"


class BadSignature(MasterError):
    """A signature did not verify."""

    kind = "bad_signature"


class LimitExceeded(MasterError):
    """A size, rate or count limit was hit."""

    kind = "limit_exceeded"


class MasterTimeout(MasterError, TimeoutError):
    """An operation timed out on the master's side, or a wait (for a deployment)
    ran out of time while it was still in progress."""

    kind = "timeout"


class UnsupportedVersion(MasterError):
    """The master does not speak this SDK's protocol version."""

    kind = "unsupported_version"


class InternalError(MasterError):
    """The master failed internally (its store unreachable, for example)."""

    kind = "internal"


class Conflict(MasterError):
    """The request conflicts with what is already there (an enrollment token for
    a minion id whose key is accepted, without ``replace=True``)."""

    kind = "conflict"


_BY_KIND = {
    cls.kind: cls
    for cls in (
        BadRequest,
        Forbidden,
        NotFound,
        UnknownFunction,
        BadSignature,
        LimitExceeded,
        MasterTimeout,
        UnsupportedVersion,
        InternalError,
        Conflict,
    )
}

_BY_VARIANT = {
    "argument": InvalidArgument,
    "config": ConfigError,
    "connect": ConnectError,
    "disconnected": DisconnectedError,
    "protocol": ProtocolError,
    "timeout": RequestTimeout,
}


def _from_native(
    variant: str, message: str, kind: Optional[str], addr: Optional[str]
) -> HaliteError:
    """The exception for an SDK error (called by ``halite._native``)."""
    if variant == "master":
        cls = _BY_KIND.get(kind or "", MasterError)
        return cls(message, kind)
    error = _BY_VARIANT.get(variant, ProtocolError)(message)
    if isinstance(error, ConnectError):
        error.addr = addr
    return error
