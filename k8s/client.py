"""Building the ApiClient: a kubeconfig when given, else in-cluster, else the default file.

Every request is bounded (issue: an apiserver that accepts a connection and never answers
must not hold a run, and so its key, for ever): a request that names no timeout of its own gets
``(CONNECT_TIMEOUT_SECONDS, REQUEST_TIMEOUT_SECONDS)``; watches name theirs (server-side
timeout plus a client read timeout, ``k8s/watch.py``). Writes carry the field manager
``hikyo-operator``: the apiserver takes it from the User-Agent when a request names none.
"""

from __future__ import annotations

import os
from importlib import metadata
from typing import Any

from kubernetes import client, config
from urllib3.util.retry import Retry

CONNECT_TIMEOUT_SECONDS = 5.0
REQUEST_TIMEOUT_SECONDS = 30.0
FIELD_MANAGER = "hikyo-operator"


def api_client(
    kubeconfig: str | None = None,
    *,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    read_timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> client.ApiClient:
    return bounded(_unbounded(kubeconfig), connect_timeout, read_timeout)


class ClusterUnavailable(Exception):
    """No usable Kubernetes configuration. The message is one line naming where it looked
    (KUBECONFIG, in-cluster, ~/.kube/config) and why, never the file's text (it holds
    credentials): what a command or a process prints before it exits non-zero."""


def _unbounded(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        try:
            return config.new_client_from_config(config_file=kubeconfig)
        except Exception as error:  # every load failure is this one line
            raise ClusterUnavailable(
                f"no cluster configured: KUBECONFIG={kubeconfig!r} "
                f"{_file_problem(kubeconfig, error)}"
            ) from None
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError) as error:  # not in a pod, or its token unreadable
        in_cluster = _first_line(error)
    try:
        return config.new_client_from_config()
    except Exception as error:
        raise ClusterUnavailable(
            "no cluster configured: KUBECONFIG is not set, in-cluster configuration failed "
            f"({in_cluster}) and ~/.kube/config {_file_problem('~/.kube/config', error)}"
        ) from None


def _file_problem(path: str, error: Exception) -> str:
    """Why a kubeconfig did not load, in a few words: the client's own one-line reason, else
    the error's type (a YAML error quotes the file, which may hold a token)."""
    paths = [os.path.expanduser(part) for part in path.split(os.pathsep) if part]
    if paths and not any(os.path.exists(part) for part in paths):
        return "does not exist"
    if isinstance(error, config.ConfigException):
        return f"is not a usable kubeconfig: {_first_line(error)}"
    if isinstance(error, OSError) and error.strerror:
        return f"cannot be read: {error.strerror}"
    return f"is not a usable kubeconfig ({type(error).__name__})"


def _first_line(error: Exception) -> str:
    return (str(error).splitlines() or [type(error).__name__])[0]


def bounded(api: client.ApiClient, connect_timeout: float, read_timeout: float) -> client.ApiClient:
    """Gives every request of ``api`` a default (connect, read) timeout and our field manager."""
    rest = api.rest_client
    # urllib3's default retries a timed-out GET three more times: a silent apiserver would hold
    # a run four read timeouts long. Connection failures are retried; timed-out reads are not.
    rest.pool_manager.connection_pool_kw["retries"] = Retry(
        total=2, connect=2, read=0, status=0, redirect=False
    )
    rest.pool_manager.clear()
    send = rest.request

    def request(method: str, url: str, *args: Any, **kwargs: Any) -> Any:
        if not kwargs.get("_request_timeout"):
            kwargs["_request_timeout"] = (connect_timeout, read_timeout)
        return send(method, url, *args, **kwargs)

    rest.request = request
    api.user_agent = f"{FIELD_MANAGER}/{_version()}"
    return api


def _version() -> str:
    try:
        return metadata.version("hikyo-operator")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        return "dev"
