"""CoreDNS for the cluster-DNS tests: the binary (tools/build-coredns.sh, or COREDNS), and a
minimal DNS client over UDP (A queries only: what a pod's resolver asks of cluster DNS), so the
tests need no DNS library."""

from __future__ import annotations

import functools
import ipaddress
import secrets
import socket
import struct
from typing import NamedTuple

from tests.support.helm import REPO_ROOT, built_binary

BUILD_SCRIPT = REPO_ROOT / "tools" / "build-coredns.sh"
TYPE_A = 1
CLASS_IN = 1
RCODES = {0: "NOERROR", 1: "FORMERR", 2: "SERVFAIL", 3: "NXDOMAIN", 4: "NOTIMP", 5: "REFUSED"}


@functools.cache
def coredns_binary() -> str:
    return built_binary(
        BUILD_SCRIPT,
        " (it needs Go >= 1.26 and the Go module proxy; COREDNS names a built coredns instead)",
    )


class Answer(NamedTuple):
    """A response: its rcode's name and the IPv4 addresses of its A records, in order."""

    rcode: str
    addresses: list[str]


def _encode_name(name: str) -> bytes:
    labels = name.rstrip(".").split(".")
    return b"".join(bytes([len(label)]) + label.encode("ascii") for label in labels) + b"\0"


def _skip_name(data: bytes, offset: int) -> int:
    """The offset just past the (possibly compressed) name at ``offset``."""
    while True:
        length = data[offset]
        if length & 0xC0 == 0xC0:  # a pointer ends the name
            return offset + 2
        offset += 1 + length
        if length == 0:
            return offset


def query_a(host: str, port: int, name: str, timeout: float = 2.0) -> Answer | None:
    """One A query for ``name`` (recursion desired) to ``host:port``; None if no reply came
    within ``timeout`` (the server is not listening yet, or dropped it)."""
    ident = secrets.randbits(16)
    header = struct.pack(">HHHHHH", ident, 0x0100, 1, 0, 0, 0)
    question = _encode_name(name) + struct.pack(">HH", TYPE_A, CLASS_IN)
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as sock:
        sock.settimeout(timeout)
        sock.sendto(header + question, (host, port))
        try:
            data = sock.recv(4096)
        except (TimeoutError, ConnectionRefusedError):
            return None
    got_id, flags, qdcount, ancount, _, _ = struct.unpack(">HHHHHH", data[:12])
    assert got_id == ident, f"a reply to another query ({got_id} != {ident})"
    assert flags & 0x8000, "not a response"
    offset = 12
    for _ in range(qdcount):
        offset = _skip_name(data, offset) + 4
    addresses = []
    for _ in range(ancount):
        offset = _skip_name(data, offset)
        rtype, _rclass, _ttl, length = struct.unpack(">HHIH", data[offset : offset + 10])
        offset += 10
        if rtype == TYPE_A:
            addresses.append(str(ipaddress.IPv4Address(data[offset : offset + length])))
        offset += length
    return Answer(RCODES.get(flags & 0xF, str(flags & 0xF)), addresses)
