"""Every management command's cluster errors are one line (issue 34 item 3): no usable
kubeconfig, an unreachable apiserver, a refusal. Never a body, never a URL's userinfo."""

from __future__ import annotations

from types import SimpleNamespace

import pytest
from django.core.management.base import CommandError
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import ProtocolError

from controlplane.observations.cluster_errors import cluster_errors_as_one_line
from k8s.client import KubeconfigUnusable
from k8s.errors import Forbidden, KubeError
from k8s.gateway import ClusterUnavailable

API = SimpleNamespace(
    configuration=SimpleNamespace(host="https://admin:pw-c4n4ry@kube.example:6443")
)


def _body(token: str) -> ApiException:
    error = ApiException(status=500, reason="Internal")
    error.body = f'{{"message": "{token}"}}'
    return error


@pytest.mark.parametrize(
    ("raised", "line"),
    [
        (
            KubeconfigUnusable("KUBECONFIG='/x' cannot be read: No such file or directory"),
            "no cluster configured: KUBECONFIG='/x' cannot be read: No such file or directory",
        ),
        (ClusterUnavailable("no cluster configured: why"), "no cluster configured: why"),
        (
            Forbidden("list hikyosecrets team", 403, "Forbidden"),
            "cannot talk to the cluster: list hikyosecrets team: HTTP 403 Forbidden "
            "(the kubeconfig's user may not do this)",
        ),
        (
            KubeError("get hikyosecrets team/a", 401, "Unauthorized"),
            "cannot talk to the cluster: get hikyosecrets team/a: HTTP 401 Unauthorized",
        ),
        (_body("pw-c4n4ry"), "cannot talk to the cluster: HTTP 500"),
        (
            ConnectionRefusedError("refused"),
            "cannot reach the cluster at https://kube.example:6443: ConnectionRefusedError",
        ),
        (
            ProtocolError("reset"),
            "cannot reach the cluster at https://kube.example:6443: ProtocolError",
        ),
    ],
)
def test_each_cluster_error_is_one_line(raised, line):
    with pytest.raises(CommandError) as caught, cluster_errors_as_one_line(API):
        raise raised
    assert str(caught.value) == line
    assert caught.value.__cause__ is None and caught.value.__suppress_context__


def test_without_a_client_the_unreachable_line_names_no_server():
    with (
        pytest.raises(CommandError, match=r"^cannot reach the cluster: TimeoutError$"),
        cluster_errors_as_one_line(),
    ):
        raise TimeoutError


def test_a_command_error_and_other_bugs_pass_through():
    with pytest.raises(CommandError, match=r"^mine$"), cluster_errors_as_one_line(API):
        raise CommandError("mine")
    with pytest.raises(KeyError), cluster_errors_as_one_line(API):
        raise KeyError("a bug is not a cluster error")
