"""Cluster errors as one line for every management command (no body, no traceback).

A command builds its client and talks to the cluster inside ``cluster_errors_as_one_line``:
no usable kubeconfig, an unreachable or silent apiserver, and a refusal (403 and the rest) each
become a CommandError of one line. Response bodies are never shown: they may echo a request.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from urllib.parse import urlsplit

from django.core.management.base import CommandError
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from k8s.client import KubeconfigUnusable
from k8s.errors import Forbidden, KubeError
from k8s.gateway import ClusterUnavailable


@contextmanager
def cluster_errors_as_one_line(api_client: Any = None) -> Iterator[None]:
    """``api_client``, when known, names the apiserver an unreachable cluster is at."""
    pool = logging.getLogger("urllib3.connectionpool")
    level = pool.level
    pool.setLevel(logging.ERROR)  # each retried connection is a warning; the one line says it
    try:
        yield
    except ClusterUnavailable as error:
        raise CommandError(str(error)) from None
    except KubeconfigUnusable as error:
        raise CommandError(f"no cluster configured: {error}") from None
    except Forbidden as error:
        raise CommandError(
            f"cannot talk to the cluster: {error} (the kubeconfig's user may not do this)"
        ) from None
    except KubeError as error:
        raise CommandError(f"cannot talk to the cluster: {error}") from None
    except ApiException as error:  # not translated by the gateway; never the body
        raise CommandError(f"cannot talk to the cluster: HTTP {error.status}") from None
    except (HTTPError, OSError) as error:  # unreachable or silent: it says no more
        raise CommandError(
            f"cannot reach the cluster{_at(api_client)}: {type(error).__name__}"
        ) from None
    finally:
        pool.setLevel(level)


def _at(api_client: Any) -> str:
    """`` at scheme://host:port`` of the apiserver (never a userinfo part), else ""."""
    host = getattr(getattr(api_client, "configuration", None), "host", None)
    if not host:
        return ""
    parts = urlsplit(str(host))
    return f" at {parts.scheme}://{parts.hostname}{f':{parts.port}' if parts.port else ''}"
