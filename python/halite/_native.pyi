"""Type stubs for ``halite._native``, the Rust part of the SDK. Use the
``halite`` package instead: it wraps these in typed results."""

from typing import Any, List, Optional

SDK_VERSION: str

def generate_key(path: str, seed: Optional[str] = None) -> str:
    """Generates a principal key into ``path`` (0600, never overwriting); its public
    key as 64 hex digits. With ``seed`` (64 hex digits, secret), the key that seed
    makes, the same on every host."""

def public_key(path: str) -> str:
    """The public key (64 hex digits) of the principal key file at ``path``."""

class NativeClient:
    @staticmethod
    def connect(options: str) -> NativeClient:
        """Connects (blocking, the GIL released) with options as JSON."""
    @staticmethod
    def connect_async(options: str) -> Any:
        """Connects; an awaitable of the client."""
    def call(self, call: str) -> str:
        """Carries out ``{"op": ..., ...}`` (JSON), blocking; the result as JSON."""
    def call_async(self, call: str) -> Any:
        """``call`` as an awaitable of the JSON result."""
    def subscribe(self, patterns: List[str], after: Optional[str] = None) -> NativeEvents: ...
    def subscribe_async(self, patterns: List[str], after: Optional[str] = None) -> Any: ...
    def master_addr(self) -> str: ...
    def close(self) -> None: ...

class NativeEvents:
    def next(self, timeout: Optional[float] = None) -> Optional[str]:
        """The next event as JSON, or ``None`` past ``timeout`` seconds."""
    def next_async(self) -> Any:
        """An awaitable of the next event as JSON."""
    def close(self) -> None: ...
