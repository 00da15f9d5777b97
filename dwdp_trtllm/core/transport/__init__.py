"""Peer transport: make every DWDP peer's local expert buffers addressable from this rank."""
from .base import PeerTransport, TransportError
from .select import make_transport

__all__ = ["PeerTransport", "TransportError", "make_transport"]
