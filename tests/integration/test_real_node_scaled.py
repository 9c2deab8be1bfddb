"""Issue 50, scaled mode on the real node: the chart's run_operator replicas, a Celery worker
and its bundled Redis (the locally built image, tools/build-node-images.sh) as pods, the
observation store in a PostgreSQL on the node's address, names resolved by the node's cluster
DNS. A rolling update to a new image digest hands the Lease over with no two runs of one CR
overlapping and every CR converging (the run records in PostgreSQL show it).

Opt-in (``pytest -m node``) like tests/integration/test_real_node.py, with the same needs.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import time
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from kubernetes import client

from devserver.faults import Fault
from localcluster.node import import_image
from localcluster.node_cluster import OPERATOR_IMAGE, REDIS_IMAGE, archive_digest, node_images
from localcluster.node_layout import BRIDGE, NODE_IP, POD_SUBNET
from tests.support.helm import CHART, helm, seed_values
from tests.support.processes import PostgresServer, locate_postgres
from tests.support.prometheus import (
    firing,
    rules_at_test_speed,
    running_prometheus,
    service_monitor,
)
from tests.support.real_node import (
    APPS,
    ENVIRONMENT,
    NAMESPACE,
    ORG,
    PROJECT,
    RELEASE,
    TOKEN,
    Node,
    create_cr,
    deliver,
    delivered,
    force_sync,
    image_digest,
    lease,
    namespace,
    rolled_out,
    running_node,
    selects,
    wait,
)
from tests.support.world import canary
from workers.broker_window import SPARE_MIN

pytestmark = pytest.mark.node

EXTRA_CRS = 5  # beside `app`: CRs whose Secret no workload reads
BUILDAH_TIMEOUT_SECONDS = 600
BUG = Path(__file__).parents[1] / "support" / "buggy_build" / "hikyo_test_bug.py"
SITE_PACKAGES = "/usr/local/lib/python3.11/dist-packages"  # the image's (Containerfile)
# Created while no worker runs, over QUEUE_GROWTH_SECONDS: more than the keys the leaders may
# hand out to no worker at all (SPARE_MIN), so the rest stay due in the queue.
QUEUED_CRS = SPARE_MIN + 16
QUEUE_GROWTH_SECONDS = 12  # 12 steps of the test-speed rule's 1 s subquery


@pytest.fixture(scope="module")
def scaled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Node, PostgresServer]]:
    with running_node(tmp_path_factory.mktemp("scaled")) as node:
        # PostgreSQL as the chart expects it: outside the cluster, named by a DSN in a Secret
        database = PostgresServer(locate_postgres(False), host=NODE_IP, clients=POD_SUBNET)
        database.start()
        try:
            yield node, database
        finally:
            database.stop()


def _components(node: Node) -> dict[str, list[client.V1Pod]]:
    found: dict[str, list[client.V1Pod]] = {}
    for pod in node.core.list_namespaced_pod(NAMESPACE).items:
        if pod.metadata.deletion_timestamp is None:
            component = pod.metadata.labels.get("app.kubernetes.io/component", "")
            found.setdefault(component, []).append(pod)
    return found


def _ready(pod: client.V1Pod) -> bool:
    statuses = pod.status.container_statuses or []
    return pod.status.phase == "Running" and bool(statuses) and all(s.ready for s in statuses)


def test_the_scaled_release_runs_its_leaders_worker_and_redis_on_the_node(scaled) -> None:
    node, database = scaled
    namespace(node, NAMESPACE)
    namespace(node, APPS)
    node.core.create_namespaced_secret(
        NAMESPACE,
        client.V1Secret(
            metadata=client.V1ObjectMeta(name="hikyo-operator-database"),
            string_data={"database-url": database.url},
        ),
    )
    redis_archive, _ = node_images()[REDIS_IMAGE]
    values = seed_values()
    values["operator"] |= {
        "image": {"digest": image_digest()},
        "replicaCount": 2,
        "scaled": {
            "enabled": True,
            "workers": 1,
            "redis": {"image": f"localhost/hikyo-redis@{archive_digest(redis_archive)}"},
            "database": {"existingSecret": "hikyo-operator-database"},
        },
    }
    installed = helm(
        "install", RELEASE, str(CHART), "--namespace", NAMESPACE, "--wait", "--timeout", "240s",
        kubeconfig=node.cluster.kubeconfig, values=values, tmp=node.tmp,
    )  # fmt: skip
    assert installed.returncode == 0, installed.stderr[-2000:]
    components = _components(node)
    assert {name: len(pods) for name, pods in components.items()} == {
        "hikyo-operator": 2,
        "hikyo-operator-worker": 1,
        "redis": 1,
    }, components.keys()
    assert all(_ready(pod) for pods in components.values() for pod in pods)
    leaders = [p.metadata.name for p in components["hikyo-operator"]]
    holder = lease(node).spec.holder_identity or ""
    assert [name for name in leaders if holder.startswith(name)], (holder, leaders)


def _variant(node: Node, tag: str, bug: bool = False) -> str:
    """The operator image again under a new digest (one label more), as a release would be,
    imported into the node as OPERATOR_IMAGE@digest; ``bug``: with a bug in it
    (tests/support/buggy_build). Its digest."""
    (archive, _) = next(paths for image, paths in node_images().items()
                        if image.startswith(OPERATOR_IMAGE))  # fmt: skip
    storage = node.tmp / "buildah"
    bah = ["buildah", "--storage-driver", "vfs", "--root", str(storage / "root"),
           "--runroot", str(storage / "run")]  # fmt: skip

    def run(*args: str) -> str:
        done = subprocess.run(
            [*bah, *args], capture_output=True, text=True, timeout=BUILDAH_TIMEOUT_SECONDS
        )
        assert done.returncode == 0, done.stderr[-2000:]
        return done.stdout.strip()

    container = run("from", "--quiet", f"oci-archive:{archive}")
    run("config", "--label", f"dev.hikyo.test/variant={tag}", container)
    if bug:  # site runs a .pth file's import line at every start of python
        pth = node.tmp / "hikyo-test-bug.pth"
        pth.write_text(f"import {BUG.stem}\n")
        for part in (BUG, pth):
            run("copy", "--chmod", "0644", container, str(part), f"{SITE_PACKAGES}/{part.name}")
    local = f"localhost/hikyo-operator-variant:{tag}"
    run("commit", "--quiet", "--rm", container, local)
    out = node.tmp / f"operator-{tag}.oci.tar"
    run("push", "--quiet", "--digestfile", f"{out}.digest", local,
        f"oci-archive:{out}:{OPERATOR_IMAGE}:{tag}")  # fmt: skip
    digest = Path(f"{out}.digest").read_text().strip()
    import_image(node.cluster.node_paths, out, f"{OPERATOR_IMAGE}:{tag}", digest)
    return digest


def test_a_rolling_update_hands_the_lease_over_and_leaves_no_cr_behind(scaled) -> None:
    node, database = scaled
    first, second = canary("scaledfirst"), canary("scaledsecond")
    deliver(node, first)
    extras = [f"extra-{n}" for n in range(EXTRA_CRS)]
    for name in extras:
        create_cr(node, name, f"{name}-env")
    wait("app prints the first value", lambda: rolled_out(node, "app", f"env {first}"), 240)
    for name in extras:
        wait(f"{name} delivered", lambda name=name: delivered(node, f"{name}-env") == first, 120)
    digest = _variant(node, "variant")
    before = lease(node)

    node.publish(second)  # changes arriving while the leaders roll
    upgraded = helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", f"operator.image.digest={digest}", "--wait", "--timeout", "300s",
        kubeconfig=node.cluster.kubeconfig, tmp=node.tmp,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr[-2000:]

    pods = _components(node)["hikyo-operator"]
    assert len(pods) == 2 and all(digest in p.spec.containers[0].image for p in pods)

    def held_by_a_new_pod() -> client.V1Lease | None:
        held = lease(node)
        holder = held.spec.holder_identity or ""
        return held if any(holder.startswith(p.metadata.name) for p in pods) else None

    after = wait("the Lease held by a new pod", held_by_a_new_pod, 120)
    assert isinstance(after, client.V1Lease)
    assert (after.spec.lease_transitions or 0) > (before.spec.lease_transitions or 0)
    wait("app prints the second value", lambda: rolled_out(node, "app", f"env {second}"), 240)
    for name in extras:  # no CR left behind
        wait(f"{name} current", lambda name=name: delivered(node, f"{name}-env") == second, 120)

    # No value or token in any of the release's pods' output (leaders, worker, Redis).
    logs = "".join(
        node.logs(NAMESPACE, pod.metadata.name)
        for pods in _components(node).values()
        for pod in pods
    )
    assert logs
    assert not [value for value in (first, second, TOKEN) if value in logs]

    with database.connect() as connection:
        runs = connection.execute(
            "SELECT uid, started_at, duration_ms FROM observations_reconcilerun "
            "ORDER BY uid, started_at"
        ).fetchall()
    assert runs
    by_uid: dict[str, list[tuple[float, float]]] = {}
    for uid, started, duration_ms in runs:
        start = started.timestamp()
        by_uid.setdefault(uid, []).append((start, start + duration_ms / 1000))
    assert len(by_uid) == EXTRA_CRS + 1
    for uid, intervals in by_uid.items():  # S4.1.4 across the old and the new pods
        for (_, end), (start, _) in itertools.pairwise(intervals):
            # duration_ms is rounded: a run starting within that millisecond is not an overlap
            assert start >= end - 0.001, f"two runs of {uid} overlapped in the rolling update"


def _scale(node: Node, component: str, replicas: int) -> None:
    name = f"{RELEASE}-{component}"
    node.apps.patch_namespaced_deployment_scale(name, NAMESPACE, {"spec": {"replicas": replicas}})


def _hikyo_secret(name: str, credential: str) -> dict:
    return {
        "apiVersion": "hikyo.dev/v1alpha1",
        "kind": "HikyoSecret",
        "metadata": {"name": name},
        "spec": {
            "instanceRef": {"name": "primary"},
            "auth": {"secretRef": {"name": credential}},
            "scope": {"org": ORG, "project": PROJECT, "environment": ENVIRONMENT},
            "mapping": [{"key": "APP_VALUE"}],
            "target": {"name": f"{name}-env"},
        },
    }


def _credential(node: Node, name: str, token: str) -> None:
    node.devserver.add_credential(token, ORG, PROJECT, ENVIRONMENT)
    node.core.create_namespaced_secret(
        APPS,
        client.V1Secret(
            metadata=client.V1ObjectMeta(
                name=name,
                labels={"hikyo.dev/delivery": "true", "hikyo.dev/instance": "primary"},
            ),
            string_data={"hikyo-token": token},
        ),
    )


REDIS_CLIENTS = ("hikyo-operator", "hikyo-operator-shard-1", "hikyo-operator-worker")


def _two_shards(node: Node) -> None:
    """The release with operator.scaled.shards 2 and its NetworkPolicies on (the bridge plugin
    does not enforce them; their selectors are read against the live pods)."""
    if "hikyo-operator-shard-1" in _components(node):
        return
    upgraded = helm(
        "upgrade", RELEASE, str(CHART), "--namespace", NAMESPACE, "--reuse-values",
        "--set", "operator.scaled.shards=2", "--set", "operator.networkPolicy.enabled=true",
        "--wait", "--timeout", "240s", kubeconfig=node.cluster.kubeconfig, tmp=node.tmp,
    )  # fmt: skip
    assert upgraded.returncode == 0, upgraded.stderr[-2000:]


def test_with_two_shards_every_leader_and_worker_pod_is_a_peer_of_redis(scaled) -> None:
    """The NetworkPolicies as the apiserver holds them, read against the running pods: each
    shard leader's and the worker's pods are selected by exactly one policy, whose egress names
    the live Redis pod, and the Redis policy admits every one of them."""
    node, _ = scaled
    _two_shards(node)
    policies = client.NetworkingV1Api(node.api).list_namespaced_network_policy(NAMESPACE).items
    as_dicts = [node.api.sanitize_for_serialization(p)["spec"] for p in policies]
    components = _components(node)
    (redis,) = components["redis"]
    (redis_policy,) = [p for p in as_dicts if selects(p["podSelector"], redis.metadata.labels)]
    admitted = [peer["podSelector"] for peer in redis_policy["ingress"][0]["from"]]
    clients = [pod for name in REDIS_CLIENTS for pod in components.get(name, [])]
    assert len(clients) == 5  # two pods per shard, one worker
    for pod in clients:
        (own,) = [p for p in as_dicts if selects(p["podSelector"], pod.metadata.labels)]
        to_redis = [peer["podSelector"] for rule in own["egress"] for peer in rule.get("to", [])
                    if "podSelector" in peer]  # fmt: skip
        assert [s for s in to_redis if selects(s, redis.metadata.labels)], pod.metadata.name
        assert [s for s in admitted if selects(s, pod.metadata.labels)], pod.metadata.name


def _worker_image(node: Node, image: str | None = None) -> str:
    """The worker Deployment's image; set to ``image`` when given."""
    name = f"{RELEASE}-hikyo-operator-worker"
    (container,) = node.apps.read_namespaced_deployment(
        name, NAMESPACE
    ).spec.template.spec.containers
    if image is not None:
        patch = {
            "spec": {
                "template": {"spec": {"containers": [{"name": container.name, "image": image}]}}
            }
        }
        node.apps.patch_namespaced_deployment(name, NAMESPACE, patch)
    return image or container.image


def _runs(node: Node, component: str, image: str) -> bool:
    """``component``'s pods all run ``image`` and are Ready, and none other is left, not even
    one still terminating (a terminating worker still takes tasks in its grace period)."""
    pods = node.core.list_namespaced_pod(
        NAMESPACE, label_selector=f"app.kubernetes.io/component={component}"
    ).items
    return bool(pods) and all(
        p.metadata.deletion_timestamp is None and _ready(p) and p.spec.containers[0].image == image
        for p in pods
    )


def test_every_alert_fires_and_clears_on_a_live_scrape(scaled) -> None:
    """The chart's rules (tests/support/prometheus.rules_at_test_speed) on a live scrape of both
    shards' leaders and the worker, as the ServiceMonitor's default sees them: quiet while all
    is well; then each alert of the chart fires from its cause, with its labels (the Hikyo
    instance, the shard), and clears once the cause is fixed. The panic is a worker built
    with a bug (tests/support/buggy_build), then the worker as released."""
    node, _ = scaled
    _two_shards(node)
    value = canary("alertvalue")  # what every delivery below carries
    node.publish(value)

    # What the chart's ServiceMonitor names (rendered: the node has no prometheus-operator),
    # its endpoints found again before each look, as prometheus-operator keeps them current.
    monitor = service_monitor(node.tmp, node.cluster.kubeconfig, RELEASE, NAMESPACE)
    (endpoint,) = monitor["spec"]["endpoints"]

    def now(check: Callable[[], object]) -> Callable[[], object]:
        def look() -> object:
            prometheus.scrape_as(monitor, node.api)
            return check()

        return look

    def fires(alert: str, timeout: float = 120) -> list[dict[str, str]]:
        labels = wait(alert, now(lambda: firing(prometheus, alert)), timeout)
        assert isinstance(labels, list)
        return labels

    def clears(alert: str, timeout: float = 120) -> None:
        wait(f"{alert} cleared", now(lambda: not firing(prometheus, alert)), timeout)

    def ready(component: str) -> list[client.V1Pod]:
        return [p for p in _components(node).get(component, []) if _ready(p)]

    directory = node.tmp / "prometheus-scaled"
    directory.mkdir()
    rules = rules_at_test_speed(directory)
    honor = endpoint["honorLabels"]
    with running_prometheus(directory / "server", rules, honor_labels=honor) as prometheus:
        # the three metrics Services: shard 0's leaders, shard 1's, the workers
        services = "count by (service) (up == 1)"
        wait("every Service scraped", now(lambda: len(prometheus.query(services)) == 3), 90)
        two_leaders = "sum(hikyo_operator_leader) == 2"  # one per shard
        wait("both shards' leaders", now(lambda: prometheus.query(two_leaders)), 90)
        slots = "hikyo_operator_worker_slots > 0"
        wait("the worker's slots", now(lambda: prometheus.query(slots)), 60)
        # Rules evaluated before the first scrape saw nothing (absent: NoLeader); the first
        # evaluation after it is quiet.
        quiet = 'ALERTS{alertstate="firing"}'
        wait("no alert firing", now(lambda: prometheus.query(quiet) == []), 60)

        # a HikyoSecret whose credential does not exist cannot be delivered
        crs = ("hikyo.dev", "v1alpha1", APPS, "hikyosecrets")
        node.custom.create_namespaced_custom_object(
            *crs, _hikyo_secret("broken", "no-such-credential")
        )
        (labels,) = fires("HikyoSecretsNotReady")
        assert labels["blocker"] and labels["severity"] == "warning"
        node.custom.delete_namespaced_custom_object(*crs, "broken")
        clears("HikyoSecretsNotReady")

        # a credential of its own for the HikyoSecret `expiring`, which the server answers for
        token = canary("alerttoken")
        _credential(node, "expiring-credential", token)
        node.devserver.set_expiry(token, datetime.now(UTC) + timedelta(days=2))
        node.custom.create_namespaced_custom_object(
            *crs, _hikyo_secret("expiring", "expiring-credential")
        )
        (labels,) = fires("HikyoCredentialExpiresSoon")
        assert labels["severity"] == "warning"
        # Expired on a 200: the server's clock two minutes behind the operator's
        node.clock.advance(-120)
        node.devserver.set_expiry(token, datetime.now(UTC) - timedelta(seconds=30))
        force_sync(node, "expired", "expiring")
        (labels,) = fires("HikyoCredentialExpired")
        assert labels["severity"] == "critical"
        clears("HikyoCredentialExpiresSoon")
        node.clock.advance(120)
        node.devserver.set_expiry(token, None)
        force_sync(node, "renewed", "expiring")
        clears("HikyoCredentialExpired")

        node.devserver.set_fault(token, Fault.rate_limited(retry_after="1"))
        force_sync(node, "limited", "expiring")
        (labels,) = fires("HikyoInstanceRateLimited")
        assert labels["hikyo_instance"] == "primary", labels  # one alert, not one per pod
        node.devserver.clear_fault(token)
        clears("HikyoInstanceRateLimited")

        node.devserver.set_fault(token, Fault.status(503))
        force_sync(node, "failing", "expiring")
        (labels,) = fires("HikyoOperatorReconcileErrors")
        assert labels["severity"] == "warning"
        node.devserver.clear_fault(token)
        clears("HikyoOperatorReconcileErrors")

        # a worker built with a bug (tests/support/buggy_build): each run of `panics` raises
        fixed = _worker_image(node)
        buggy = f"{OPERATOR_IMAGE}@{_variant(node, 'buggy', bug=True)}"
        _worker_image(node, buggy)
        wait("the buggy worker Ready", lambda: _runs(node, "hikyo-operator-worker", buggy), 150)
        node.custom.create_namespaced_custom_object(
            *crs, _hikyo_secret("panics", "hikyo-credential")
        )
        (labels,) = fires("HikyoOperatorReconcilePanics")
        assert labels["severity"] == "warning"
        (pod,) = _components(node)["hikyo-operator-worker"]
        buggy_log = node.logs(NAMESPACE, pod.metadata.name)  # gone with its pod at the fix
        assert "failed unexpectedly" in buggy_log
        _worker_image(node, fixed)  # the fix
        wait("the fixed worker Ready", lambda: _runs(node, "hikyo-operator-worker", fixed), 150)
        clears("HikyoOperatorReconcilePanics")
        wait("panics delivered", lambda: delivered(node, "panics-env"), 120)

        # no worker: the keys of new HikyoSecrets pile up in the queue
        _scale(node, "hikyo-operator-worker", 0)
        (labels,) = fires("HikyoOperatorNoWorkers", 150)
        assert labels["severity"] == "critical"
        piling = [f"piling-{n}" for n in range(QUEUED_CRS)]
        for name in piling:
            node.custom.create_namespaced_custom_object(
                *crs, _hikyo_secret(name, "hikyo-credential")
            )
            time.sleep(QUEUE_GROWTH_SECONDS / QUEUED_CRS)  # growth Prometheus can see
        fires("HikyoOperatorQueueGrowing")
        _scale(node, "hikyo-operator-worker", 1)
        wait("a worker Ready", lambda: ready("hikyo-operator-worker"), 120)
        clears("HikyoOperatorNoWorkers", 150)
        clears("HikyoOperatorQueueGrowing", 150)
        for name in piling:  # each carries the canary value the checks below look for
            wait(f"{name} delivered",
                 lambda name=name: delivered(node, f"{name}-env") == value, 120)  # fmt: skip

        # shard 1 without a leader: its alert names the shard, shard 0 is not named
        _scale(node, "hikyo-operator-shard-1", 0)
        wait("no shard-1 pod", lambda: not _components(node).get("hikyo-operator-shard-1"), 150)
        (labels,) = fires("HikyoOperatorNoLeader", 60)
        assert (labels["shard"], labels["severity"]) == ("1", "critical"), labels
        _scale(node, "hikyo-operator-shard-1", 2)
        wait("shard 1 leads again", lambda: ready("hikyo-operator-shard-1"), 150)
        clears("HikyoOperatorNoLeader")

        # No value or token in any series Prometheus holds, nor in the release's logs (the
        # buggy worker's traceback included).
        series = json.dumps(prometheus.query('{__name__=~".+"}'))
        logs = buggy_log + "".join(
            node.logs(NAMESPACE, p.metadata.name) for ps in _components(node).values() for p in ps
        )
        assert '"hikyo_operator_leader"' in series and "failed unexpectedly" in logs
        assert not [s for s in (value, token, TOKEN) if s in series or s in logs]


def _host_leftovers(node: Node) -> list[str]:
    """What a stopped node could leave on the host: its processes, mounts, the pods' network
    namespaces, the bridge, the kubelet's and kube-proxy's iptables chains."""
    root = str(node.cluster.state_dir)
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                command = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
                cgroups = (proc / "cgroup").read_text()
            except OSError:
                continue  # gone meanwhile
            if root in command or "/kubepods" in cgroups:  # a node process, or a container's
                found.append(f"process {proc.name}: {command[:80]}")
    found += [
        f"mount {line.split()[1]}"
        for line in Path("/proc/self/mounts").read_text().splitlines()
        if line.split()[1].startswith(root)
    ]
    netns = Path("/var/run/netns")
    found += [f"netns {n.name}" for n in netns.glob("cni-*")] if netns.is_dir() else []
    if (
        subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True, timeout=30).returncode
        == 0
    ):
        found.append(f"bridge {BRIDGE}")
    for table in ("filter", "nat", "mangle"):
        rules = subprocess.run(
            ["iptables", "-w", "5", "-t", table, "-S"], capture_output=True, text=True, timeout=30
        ).stdout
        found += [f"iptables {table}: {rule}" for rule in rules.splitlines() if "KUBE-" in rule]
    return found


def test_stopping_the_node_leaves_nothing_on_the_host(scaled) -> None:
    """localcluster's stop (what `python -m localcluster down` runs) with the release's pods
    still running: every container, mount, network namespace, rule and the bridge go."""
    node, _ = scaled
    assert _components(node)  # pods are running
    running = _host_leftovers(node)  # what the check finds while the node runs
    assert f"bridge {BRIDGE}" in running and [r for r in running if r.startswith("process")]
    node.cluster.stop()
    assert _host_leftovers(node) == []
