"""The harness's port chooser keeps out of the kernel's ephemeral range, where an outgoing
connection could take a chosen port before its server binds it (a CI failure: "cannot serve
http on 127.0.0.1:42041 ... Address already in use" after four workers booted)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from localcluster import ports


def test_the_ranges_are_those_below_and_above_the_ephemeral_range():
    assert ports.candidate_ports((32768, 60999)) == [range(10000, 32768), range(61000, 65536)]


def test_an_ephemeral_range_reaching_the_top_leaves_only_the_ports_below_it():
    assert ports.candidate_ports((20000, 65535)) == [range(10000, 20000)]


def test_an_ephemeral_range_covering_everything_leaves_no_port():
    assert ports.candidate_ports((1024, 65535)) == []


def test_the_range_is_read_from_the_kernel_file(tmp_path: Path):
    path = tmp_path / "ip_local_port_range"
    path.write_text("40000\t50000\n")
    assert ports.ephemeral_range(path) == (40000, 50000)


@pytest.mark.parametrize("text", [None, "", "one two", "40000"])
def test_an_unreadable_range_is_linux_default(tmp_path: Path, text: str | None):
    path = tmp_path / "ip_local_port_range"
    if text is not None:
        path.write_text(text)
    assert ports.ephemeral_range(path) == ports.LINUX_DEFAULT_EPHEMERAL


def test_ports_lie_outside_the_ephemeral_range_and_are_never_handed_out_twice():
    low, high = ports.ephemeral_range()
    chosen = [ports.free_port() for _ in range(200)]
    assert len(set(chosen)) == len(chosen)
    assert all(port >= ports.LOWEST and not low <= port <= high for port in chosen)


def test_a_port_something_listens_on_is_never_chosen(monkeypatch: pytest.MonkeyPatch):
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen()
        taken = listener.getsockname()[1]
        # the whole candidate space is the one taken port
        monkeypatch.setattr(ports, "candidate_ports", lambda _: [range(taken, taken + 1)])
        with pytest.raises(RuntimeError, match="no free loopback port"):
            ports.free_port()
