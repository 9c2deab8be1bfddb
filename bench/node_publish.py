"""``python bench/node_publish.py``: publish → an application pod serving the new value, on the
real local node (issue 50 item 3), over many publishes.

The node (``python -m localcluster up --node``), the chart installed in embedded mode with the
seed's values and the local operator image (HIKYO_IMAGE_ARCHIVE, tools/build-image.sh), one
HikyoSecret with ``resyncInterval: 30s`` delivering into Secret app-env, and a Deployment opted
in to restarts that prints the value it started with. Each round publishes a new value (and,
with ``--via force``, annotates the CR with a new ``hikyo.dev/force-sync``) and measures the
seconds until a new pod prints it and until the rollout is done. Prints p50 and max against the
bounds below; run as root, nothing else using the node's bridge.

    python bench/node_publish.py --publishes 10 --via force
    python bench/node_publish.py --publishes 10 --via resync
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

import pytest  # noqa: E402  (its outcomes are how the shared node parts refuse)

from tests.support.real_node import (  # noqa: E402
    Node,
    deliver,
    force_sync,
    install_embedded,
    rolled_out,
    running_node,
    serving,
    wait,
)
from tests.support.world import canary  # noqa: E402

RESYNC_SECONDS = 30.0  # the HikyoSecret's resyncInterval (tests/support/real_node.create_cr)
# Bounds: a forced resync restarts the application within seconds; a publish without one waits
# for the next resync, so at most the interval plus the same restart.
RESTART_SECONDS = 10.0
BOUNDS = {"force": RESTART_SECONDS, "resync": RESYNC_SECONDS + RESTART_SECONDS}
ROUND_TIMEOUT_SECONDS = 180.0


def measure(publishes: int, via: str) -> list[tuple[float, float]]:
    """(seconds to the first new pod serving the value, seconds to the rollout done) a round."""
    found = []
    with tempfile.TemporaryDirectory(prefix="hikyo-node-bench-") as tmp, running_node(
        Path(tmp), kubelet_sync=None  # the kubelet's default, as in a user's cluster
    ) as node:  # fmt: skip
        installed = install_embedded(node)
        if installed.returncode != 0:
            raise SystemExit(f"helm install failed: {installed.stderr.strip()[-300:]}")
        first = canary("benchfirst")
        deliver(node, first)
        wait("the first value served", lambda: rolled_out(node, "app", f"env {first}"), 240)
        for round_ in range(publishes):
            found.append(_round(node, round_, via))
            print(f"  round {round_ + 1}: new pod {found[-1][0]:.1f} s, rollout done "
                  f"{found[-1][1]:.1f} s", file=sys.stderr, flush=True)  # fmt: skip
    return found


def _round(node: Node, round_: int, via: str) -> tuple[float, float]:
    value = canary(f"bench{round_}")
    line = f"env {value}"
    started = time.monotonic()
    node.publish(value)
    if via == "force":
        force_sync(node, f"bench-{round_}")
    wait("a new pod serving the value", lambda: serving(node, "app", line), ROUND_TIMEOUT_SECONDS,
         every=0.2)  # fmt: skip
    first_pod = time.monotonic() - started
    wait("the rollout done", lambda: rolled_out(node, "app", line), ROUND_TIMEOUT_SECONDS, 0.2)
    return first_pod, time.monotonic() - started


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--publishes", type=int, default=10, help="rounds (default 10)")
    parser.add_argument("--via", choices=sorted(BOUNDS), default="force")
    args = parser.parse_args(argv)
    if args.publishes < 1:
        parser.error("--publishes must be at least 1")
    try:
        rounds = measure(args.publishes, args.via)
    except (pytest.fail.Exception, AssertionError) as failed:  # what is missing, or late
        print(f"node_publish: {failed}", file=sys.stderr)
        return 1
    bound = BOUNDS[args.via]
    print(f"publish → new pod serving it, real node, via {args.via}, {len(rounds)} publishes:")
    for what, index in (("first new pod", 0), ("rollout done", 1)):
        seconds = [r[index] for r in rounds]
        p50, worst = statistics.median(seconds), max(seconds)
        verdict = "within" if worst <= bound else "OVER"
        print(f"  {what:14} p50 {p50:5.1f} s, max {worst:5.1f} s (bound {bound:.0f} s: {verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
