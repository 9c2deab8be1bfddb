"""An apiserver identity with the operator's CR and event rights but no Secret rights: a
ServiceAccount bound to a ClusterRole of its own, for S4.15's 403s (namespace not bound)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from kubernetes import client

from tests.support.waiting import wait_for


@contextmanager
def without_secret_rights(
    api_client: client.ApiClient, namespace: str, name: str
) -> Iterator[client.ApiClient]:
    """A client as ServiceAccount ``namespace/name``; its ClusterRole and binding go at exit."""
    core = client.CoreV1Api(api_client)
    rbac = client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(
        namespace, client.V1ServiceAccount(metadata=client.V1ObjectMeta(name=name))
    )
    rbac.create_cluster_role(
        client.V1ClusterRole(
            metadata=client.V1ObjectMeta(name=name),
            rules=[
                client.V1PolicyRule(
                    api_groups=["hikyo.dev"],
                    resources=["hikyosecrets", "hikyosecrets/status", "hikyoinstances"],
                    verbs=["get", "list", "patch"],
                ),
                client.V1PolicyRule(
                    api_groups=[""], resources=["events"], verbs=["create", "patch"]
                ),
            ],
        )
    )
    rbac.create_cluster_role_binding(
        client.V1ClusterRoleBinding(
            metadata=client.V1ObjectMeta(name=name),
            role_ref=client.V1RoleRef(
                api_group="rbac.authorization.k8s.io", kind="ClusterRole", name=name
            ),
            subjects=[client.RbacV1Subject(kind="ServiceAccount", name=name, namespace=namespace)],
        )
    )
    token = core.create_namespaced_service_account_token(
        name,
        namespace,
        client.AuthenticationV1TokenRequest(spec=client.V1TokenRequestSpec(audiences=[])),
    ).status.token
    configuration = client.Configuration()
    configuration.host = api_client.configuration.host
    configuration.ssl_ca_cert = api_client.configuration.ssl_ca_cert
    configuration.api_key = {"authorization": f"Bearer {token}"}
    limited = client.ApiClient(configuration)
    try:
        # The apiserver authorizes from its RBAC cache: a request made at once can be refused
        # before the new binding reaches it (CI saw a 403 on the CR itself).
        wait_for(lambda: _may_get_hikyosecrets(limited), 30, what="the new binding in effect")
        yield limited
    finally:
        limited.close()
        rbac.delete_cluster_role_binding(name)
        rbac.delete_cluster_role(name)


def _may_get_hikyosecrets(limited: client.ApiClient) -> bool:
    review = client.V1SelfSubjectAccessReview(
        spec=client.V1SelfSubjectAccessReviewSpec(
            resource_attributes=client.V1ResourceAttributes(
                group="hikyo.dev", resource="hikyosecrets", verb="get"
            )
        )
    )
    answer = client.AuthorizationV1Api(limited).create_self_subject_access_review(review)
    return bool(answer.status.allowed)
