"""Loopback ports for the servers we start, taken from outside the kernel's ephemeral range.

``bind(("127.0.0.1", 0))`` answers with a port from the ephemeral range, the same range the
kernel draws the local end of every outgoing connection from. A port chosen that way and
bound by a child some seconds later may meanwhile have become the source port of a
connection to Redis or the apiserver, and the child fails with "Address already in use"
(seen in CI when four workers booted between the choice and the bind). Ports below (or
above) the ephemeral range are never taken that way, and each is handed out once per
process so two servers started together never get the same one.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

EPHEMERAL_RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
LINUX_DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 10000  # below this sit well-known and registered services' ports
ATTEMPTS = 500

_handed_out: set[int] = set()
_lock = threading.Lock()
_random = random.Random()  # its own generator: a test seeding ``random`` changes nothing here


def ephemeral_range(path: Path = EPHEMERAL_RANGE_FILE) -> tuple[int, int]:
    """The kernel's (low, high) source-port range; Linux's default where it cannot be read."""
    try:
        low, high = (int(field) for field in path.read_text().split())
    except (OSError, ValueError):
        return LINUX_DEFAULT_EPHEMERAL
    return low, high


def candidate_ports(ephemeral: tuple[int, int]) -> list[range]:
    """The port ranges outside ``ephemeral`` and at or above ``LOWEST``, empty ones left out."""
    low, high = ephemeral
    ranges = (range(LOWEST, min(low, 65536)), range(max(high + 1, LOWEST), 65536))
    return [r for r in ranges if len(r)]


def _bindable(port: int) -> bool:
    # Without SO_REUSEADDR: a port with any socket on it, even one in TIME_WAIT, is passed over.
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A loopback TCP port nothing is bound to, outside the ephemeral range, new to this process."""
    ranges = candidate_ports(ephemeral_range())
    if not ranges:
        raise RuntimeError(
            "no loopback port lies outside the ephemeral range "
            f"{ephemeral_range()} ({EPHEMERAL_RANGE_FILE}); narrow it to start local servers"
        )
    sizes = [len(r) for r in ranges]
    with _lock:
        for _ in range(ATTEMPTS):
            chosen = _random.choices(ranges, weights=sizes)[0]
            port = _random.choice(chosen)
            if port not in _handed_out and _bindable(port):
                _handed_out.add(port)
                return port
    raise RuntimeError(
        f"no free loopback port found in {ATTEMPTS} tries outside the ephemeral range"
    )
