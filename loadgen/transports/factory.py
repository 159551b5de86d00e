"""The one place a target's transport is chosen."""

from __future__ import annotations

from loadgen.errors import TransportError
from loadgen.protocols.registry import streams_tokens
from loadgen.scenario.model import Target
from loadgen.transports.aiohttp_client import AiohttpTransport
from loadgen.transports.grpc_client import GrpcTransport
from loadgen.transports.httpx_client import HttpxTransport
from loadgen.transports.lean import LeanTransport
from loadgen.transports.lean_socket import available as kernel_stamps_available


def receive_stamps(target: Target, engine: str = "native") -> str:
    """How ``target``'s responses are stamped as received: "kernel" (their arrival: :mod:`loadgen.transports.
    lean_socket`) or "read" (when latbench's code reads them). ``auto``: kernel for a target whose answers are token
    streams (:func:`~loadgen.protocols.registry.streams_tokens`) on the lean transport where the platform has the
    stamps (each read costs a few microseconds more: plain requests, ``api: http`` whatever its ``stream``, where a
    generator's rate matters most, are read-stamped)."""
    choice = target.receive_stamps
    lean = engine == "native" and _chosen(target) == "lean" and LeanTransport.supports(target.url or "")
    if choice == "read" or not lean or not kernel_stamps_available():
        return "read"
    return "kernel" if choice == "kernel" or streams_tokens(target) else "read"


def _chosen(target: Target) -> str:
    """The transport ``target`` gets: its ``transport:``, or for ``auto`` the one its URL and ``http2`` call for."""
    url = target.url or ""
    if target.transport == "grpc" or url.startswith(("grpc://", "grpcs://")):
        return "grpc"
    if target.transport == "auto":
        return "httpx" if target.http2 else "lean" if LeanTransport.supports(url) else "aiohttp"
    return target.transport


def make_transport(target: Target):
    """``transport:`` when given; else gRPC for ``grpc://`` and ``grpcs://`` URLs, httpx for ``http2: true``, the
    lean asyncio transport for plain http://, and aiohttp for TLS (and whatever else the lean path does not do).
    Not started yet."""
    if target.receive_stamps == "kernel" and receive_stamps(target) != "kernel":
        raise TransportError("receive_stamps: kernel needs the lean transport (an http:// target, transport auto or "
                             "lean, no http2) on Linux")
    choice = _chosen(target)
    url = target.url or ""
    if choice == "grpc":
        if not url.startswith(("grpc://", "grpcs://")):
            raise TransportError(f"transport: grpc sends to grpc:// or grpcs:// URLs, not {url!r}")
        return GrpcTransport(url, verify=target.verify)
    if choice == "lean":
        if not LeanTransport.supports(target.url or ""):
            raise TransportError(f"transport: lean sends to http:// only, not {target.url!r}; use transport: aiohttp")
        return LeanTransport(max_header_bytes=target.max_header_bytes,
                             receive_stamps=receive_stamps(target) == "kernel")
    if choice == "httpx":
        return HttpxTransport(verify=target.verify, http2=target.http2)
    return AiohttpTransport(verify=target.verify)
