"""bench/memory.py: what a process tree holds as one container (P4's peak per pod)."""

import multiprocessing
import os

from bench.memory import TreeSampler, private_kib, tree_kib


def test_shared_pages_are_counted_once_and_each_childs_own_pages_once_each():
    # A worker of 100 MiB resident whose two forked children wrote 5 and 7 MiB of their own:
    # 112 MiB, not the 300 MiB their three RSS readings add up to.
    assert tree_kib(100 * 1024, [5 * 1024, 7 * 1024]) == 112 * 1024
    assert tree_kib(100 * 1024, []) == 100 * 1024  # the threads pool: one process


def test_private_pages_of_a_live_process_and_none_once_gone():
    own = private_kib(os.getpid())
    assert own is not None and own > 0
    assert private_kib(2**22 + 7) is None  # above pid_max's default: no such process


def _hold(ready, done) -> None:
    block = bytearray(16 * 1024 * 1024)  # written: 16 MiB the child alone maps
    block[::4096] = b"x" * len(block[::4096])
    ready.set()
    done.wait(30)


def test_the_sampler_adds_a_forked_childs_own_pages_to_its_roots_resident_ones():
    context = multiprocessing.get_context("fork")
    ready, done = context.Event(), context.Event()
    child = context.Process(target=_hold, args=(ready, done))
    child.start()
    try:
        assert ready.wait(30)
        sampler = TreeSampler()
        sampler.add("me", os.getpid())
        sampler.sample()
        held = sampler.tree_report()["me"]
        roles = {row["pid"]: row["role"] for row in sampler.report()}
        assert roles[os.getpid()] == "main" and roles[child.pid] == "child"
        own_rss = next(r["vmrss_peak_mib"] for r in sampler.report() if r["pid"] == os.getpid())
        # The child's 16 MiB block is its own: the tree holds at least that beyond this process.
        assert held >= own_rss + 16
    finally:
        done.set()
        child.join(30)
