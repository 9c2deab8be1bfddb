"""Building the ApiClient: a kubeconfig when given, else in-cluster, else the default file."""

from __future__ import annotations

from kubernetes import client, config

REQUEST_TIMEOUT_SECONDS = 30


def api_client(kubeconfig: str | None = None) -> client.ApiClient:
    if kubeconfig:
        return config.new_client_from_config(config_file=kubeconfig)
    try:
        configuration = client.Configuration()
        config.load_incluster_config(client_configuration=configuration)
        return client.ApiClient(configuration)
    except config.ConfigException:
        return config.new_client_from_config()
