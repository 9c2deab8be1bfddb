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
# Idle connections kept per host. The library's default is 5 per CPU the node has: a process
# whose threads (watches, reconciles, reports, the Lease) outnumber that closes the extra
# connections after each request and opens new TLS ones for the next.
CONNECTION_POOL_SIZE = 32
FIELD_MANAGER = "hikyo-operator"


def api_client(
    kubeconfig: str | None = None,
    *,
    connect_timeout: float = CONNECT_TIMEOUT_SECONDS,
    read_timeout: float = REQUEST_TIMEOUT_SECONDS,
) -> client.ApiClient:
    return bounded(_unbounded(kubeconfig), connect_timeout, read_timeout)


class KubeconfigUnusable(ValueError):
    """No usable Kubernetes configuration (S8.1: the process exits non-zero). The message is one
    line naming KUBECONFIG; it never carries the file's text, which may hold a token."""


_ECHO_LIMIT = 80


def _shown(path: str) -> str:
    return repr(path if len(path) <= _ECHO_LIMIT else path[:_ECHO_LIMIT] + "...")


def _unbounded(kubeconfig: str | None) -> client.ApiClient:
    if kubeconfig:
        return _from_file(kubeconfig, f"KUBECONFIG={_shown(kubeconfig)}")
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except (config.ConfigException, OSError):  # not a pod, or its token file unreadable
        default = os.path.expanduser(config.KUBE_CONFIG_DEFAULT_LOCATION)
        return _from_file(
            default, f"KUBECONFIG is not set, this is not a pod, and {_shown(default)}"
        )


def _from_file(path: str, named: str) -> client.ApiClient:
    """The client from the kubeconfig at ``path``; any failure is one KubeconfigUnusable line.
    The library's own errors are a ConfigException, a YAML parser's error that quotes the file,
    or a TypeError on a file of the wrong shape: only the first states a reason safe to show."""
    try:
        with open(path, "rb"):  # a clear reason for a missing file, which the library lacks
            pass
    except OSError as error:
        raise KubeconfigUnusable(
            f"{named} cannot be read: {error.strerror or type(error).__name__}"
        ) from None
    try:
        return config.new_client_from_config(config_file=path)
    except config.ConfigException as error:
        # its first line, cut: an exec plugin's failure carries the plugin's stderr after it
        reason = (str(error).splitlines() or ["ConfigException"])[0][: _ECHO_LIMIT * 2]
        raise KubeconfigUnusable(f"{named} is not a usable kubeconfig: {reason}") from None
    except Exception as error:  # malformed YAML or shape: its type says enough
        raise KubeconfigUnusable(
            f"{named} is not a usable kubeconfig ({type(error).__name__})"
        ) from None


def bounded(api: client.ApiClient, connect_timeout: float, read_timeout: float) -> client.ApiClient:
    """Gives every request of ``api`` a default (connect, read) timeout and our field manager."""
    rest = api.rest_client
    # urllib3's default retries a timed-out GET three more times: a silent apiserver would hold
    # a run four read timeouts long. Connection failures are retried; timed-out reads are not.
    rest.pool_manager.connection_pool_kw["retries"] = Retry(
        total=2, connect=2, read=0, status=0, redirect=False
    )
    rest.pool_manager.connection_pool_kw["maxsize"] = CONNECTION_POOL_SIZE
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
