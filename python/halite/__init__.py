"""halite: the Python SDK for halite masters.

Built on the Rust SDK (``halite._native``), so it speaks the master's own
protocol: Noise-encrypted ZeroMQ, the principal's key, the master's key pinned.

>>> import halite
>>> client = halite.Client.connect(["10.0.0.1:4506"], principal="heat",
...                                key_file="/etc/heat/halite.key", master_key="9f2c...")
>>> for minion, result in client.run("web*", "test.ping").items():
...     print(minion, result.state, result.outputs)

:class:`Client` blocks (releasing the GIL: share it between threads);
:class:`AsyncClient` is the same for asyncio. Errors are :mod:`halite.errors`;
results are :mod:`halite.types`.
"""

from . import errors, types
from ._native import SDK_VERSION as __version__
from ._native import generate_key, public_key
from .aio import AsyncClient, AsyncEventStream, AsyncJob
from .client import Client, EventStream, Job
from .errors import (
    ConfigError,
    Conflict,
    ConnectError,
    DisconnectedError,
    Forbidden,
    HaliteError,
    InvalidArgument,
    MasterError,
    MasterTimeout,
    NotFound,
    RequestTimeout,
)

__all__ = [
    "__version__",
    "AsyncClient",
    "AsyncEventStream",
    "AsyncJob",
    "Client",
    "ConfigError",
    "Conflict",
    "ConnectError",
    "DisconnectedError",
    "EventStream",
    "Forbidden",
    "HaliteError",
    "InvalidArgument",
    "Job",
    "MasterError",
    "MasterTimeout",
    "NotFound",
    "RequestTimeout",
    "errors",
    "generate_key",
    "public_key",
    "types",
]
