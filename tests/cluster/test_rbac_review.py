"""Least privilege, asked of the API server (issue 23, scope 2): the chart's RBAC objects for a
release in the test namespace, then one SubjectAccessReview per row of the two tables of
docs/security.md ("RBAC"): every call the code makes is allowed, every listed abuse refused.
Then the ValidatingAdmissionPolicy with a node agent's token bound to a pod on a node: its own
node's GPU is written, another node's GPU and GPUNode are refused, and so is a token bound to
no node."""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from lightkube import AsyncClient
from lightkube.models.authentication_v1 import BoundObjectReference, TokenRequestSpec
from lightkube.models.authorization_v1 import (
    NonResourceAttributes,
    ResourceAttributes,
    SubjectAccessReviewSpec,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.authorization_v1 import SubjectAccessReview
from lightkube.resources.core_v1 import Pod, ServiceAccountToken

from .chart_render import CHART, ROOT, helm
from .conftest import DeleteLater
from .controller_replicas import install_crds
from .controlplane import ControlPlane, eventually
from .nodes import FakeGpuNodes
from .test_controller_reconcilers import GPU

SECURITY_DOC = ROOT / "docs" / "security.md"
RBAC_KINDS = frozenset({
    "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding",
    "ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding",
})  # fmt: skip
AGENT = "tensor-fusion-hypervisor-sa"
URL = "url"
"""The group column of a non-resource URL (the peer port's paths)."""


@dataclass(frozen=True)
class Call:
    account: str
    group: str
    resource: str
    verb: str
    where: str
    name: str

    def describe(self) -> str:
        place = f" in {self.where}" if self.where not in ("cluster", "all namespaces") else ""
        named = f" {self.name}" if self.name else ""
        return f"{self.account}: {self.verb} {self.group or 'core'}/{self.resource}{named}{place}"


def table_rows(marker: str) -> Iterator[list[str]]:
    """The cells of the rows of the table after `<!-- marker ... -->` in docs/security.md."""
    lines = SECURITY_DOC.read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"<!-- {marker}"))
    for line in lines[start + 3 :]:
        if not line.startswith("|"):
            return
        yield [cell.strip() for cell in line.strip("|").split("|")]


def split(cell: str) -> list[str]:
    return [part.strip() for part in cell.split(",") if part.strip()]


def allowed_calls() -> list[Call]:
    calls = []
    for account, group, resources, verbs, where, names, _ in table_rows("rbac-allowed"):
        for resource in split(resources):
            for verb in split(verbs):
                for name in split(names) or [""]:
                    calls.append(Call(account, "" if group == "core" else group, resource,
                                      verb, where, name))  # fmt: skip
    return calls


def refused_calls() -> list[Call]:
    rows = table_rows("rbac-refused")
    return [Call(account, "" if group == "core" else group, resource, verb, where, name)
            for account, group, resource, verb, where, name, _ in rows]  # fmt: skip


@dataclass(frozen=True)
class Release:
    fullname: str
    namespace: str
    webhook_secret: str = "tensor-fusion-webhook-secret"
    scaler_secret: str = "tf-scaler-key"

    def user(self, account: str) -> str:
        name = {"controller": self.fullname, "agent": AGENT,
                "uninstall": f"{self.fullname}-uninstall"}[account]  # fmt: skip
        return f"system:serviceaccount:{self.namespace}:{name}"

    def fill(self, text: str) -> str:
        return text.replace("<fullname>", self.fullname).replace(
            "<webhook-secret>", self.webhook_secret).replace(
            "<scaler-secret>", self.scaler_secret)  # fmt: skip

    def namespace_of(self, where: str) -> str:
        return {"cluster": "", "all namespaces": "", "release namespace": self.namespace}.get(
            where, where)  # fmt: skip


@pytest.fixture
async def release(control_plane: ControlPlane, namespace: str, tmp_path: Path
                  ) -> AsyncIterator[Release]:  # fmt: skip
    """The chart's RBAC objects (and the agent policy) of a release in the test namespace."""
    fullname = f"tf-{secrets.token_hex(3)}"
    text = await asyncio.to_thread(helm, "template", fullname, str(CHART), "--namespace",
                                   namespace, "--set", "controller.externalScalerSecrets="
                                   f"{{{Release.scaler_secret}}}")  # fmt: skip
    objects = [o for o in yaml.safe_load_all(text) if isinstance(o, dict)
               and o.get("kind") in RBAC_KINDS]  # fmt: skip
    manifest = tmp_path / "rbac.yaml"
    manifest.write_text(yaml.safe_dump_all(objects))
    await control_plane.kubectl("apply", "--server-side", "-f", str(manifest))
    try:
        yield Release(fullname, namespace)
    finally:
        await control_plane.kubectl("delete", "--ignore-not-found", "--wait=false", "-f",
                                    str(manifest))  # fmt: skip


async def review(kube: AsyncClient, release: Release, call: Call) -> bool:
    namespace = release.namespace_of(call.where)
    resource, _, subresource = call.resource.partition("/")
    groups = ["system:serviceaccounts", f"system:serviceaccounts:{release.namespace}",
              "system:authenticated"]  # fmt: skip
    if call.group == URL:
        spec = SubjectAccessReviewSpec(
            user=release.user(call.account), groups=groups,
            nonResourceAttributes=NonResourceAttributes(path=call.resource, verb=call.verb),
        )  # fmt: skip
    else:
        spec = SubjectAccessReviewSpec(
            user=release.user(call.account), groups=groups,
            resourceAttributes=ResourceAttributes(
                group=call.group, resource=resource, subresource=subresource or None,
                verb=call.verb, namespace=namespace or None,
                name=release.fill(call.name) or None,
            ),
        )  # fmt: skip
    answer = await kube.create(SubjectAccessReview(spec=spec))
    return bool(answer.status and answer.status.allowed)


async def test_every_call_of_the_table_is_allowed_and_every_abuse_refused(
    kube: AsyncClient, release: Release
) -> None:
    allowed, refused = allowed_calls(), refused_calls()
    assert len(allowed) > 100 and len(refused) >= 15, "the tables of docs/security.md"
    denied = [c.describe() for c in allowed if not await review(kube, release, c)]
    granted = [c.describe() for c in refused if await review(kube, release, c)]
    assert not denied, f"calls the code makes but the chart refuses: {denied}"
    assert not granted, f"calls the chart must refuse but allows: {granted}"


async def test_the_table_names_every_rule_of_the_chart(release: Release) -> None:
    """No rule grants what the table does not list (a rule added without its row fails)."""
    text = await asyncio.to_thread(helm, "template", release.fullname, str(CHART),
                                   "--namespace", release.namespace)  # fmt: skip
    listed = {(c.account, c.group, c.resource, c.verb, release.namespace_of(c.where))
              for c in allowed_calls()}  # fmt: skip
    accounts = {release.fullname: "controller", AGENT: "agent",
                f"{release.fullname}-uninstall": "uninstall"}  # fmt: skip
    objects = [o for o in yaml.safe_load_all(text) if isinstance(o, dict)]
    roles = {(o["kind"], o["metadata"]["name"]): o for o in objects
             if o.get("kind") in ("ClusterRole", "Role")}  # fmt: skip
    extra = []
    for binding in objects:
        if binding.get("kind") not in ("ClusterRoleBinding", "RoleBinding"):
            continue
        role = roles.get((binding["roleRef"]["kind"], binding["roleRef"]["name"]))
        if role is None:  # a built-in role (kube-scheduler's)
            continue
        where = binding["metadata"].get("namespace", "") if binding["kind"] == "RoleBinding" else ""
        for subject in binding["subjects"]:
            account = accounts[subject["name"]]
            for rule in role["rules"]:
                for pattern in rule.get("nonResourceURLs", ()):
                    for verb in rule["verbs"]:
                        if not any(c.account == account and c.group == URL and c.verb == verb
                                   and url_matches(pattern, c.resource)
                                   for c in allowed_calls()):  # fmt: skip
                            extra.append((account, URL, pattern, verb, where))
                for group in rule.get("apiGroups", ()):
                    for resource in rule["resources"]:
                        for verb in rule["verbs"]:
                            if (account, group, resource, verb, where) not in listed:
                                extra.append((account, group, resource, verb, where))
    assert not extra, f"rules without a row in docs/security.md: {extra}"


def url_matches(pattern: str, path: str) -> bool:
    """RBAC's match of a non-resource URL: the path itself, or a prefix ending in `*`."""
    return path.startswith(pattern[:-1]) if pattern.endswith("*") else path == pattern


async def agent_client(control_plane: ControlPlane, kube: AsyncClient, release: Release,
                       pod: Pod | None) -> httpx.AsyncClient:  # fmt: skip
    """An HTTP client with a token of the agent's account (bound to `pod` when given)."""
    bound = None
    if pod is not None:
        assert pod.metadata is not None
        bound = BoundObjectReference(kind="Pod", apiVersion="v1", name=pod.metadata.name,
                                     uid=pod.metadata.uid)  # fmt: skip
    request = ServiceAccountToken(
        metadata=ObjectMeta(name=AGENT, namespace=release.namespace),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=600, boundObjectRef=bound),
    )
    created = await kube.create(request, name=AGENT, namespace=release.namespace)
    assert created.status is not None
    admin = yaml.safe_load(control_plane.kubeconfig.read_text())
    server = admin["clusters"][0]["cluster"]["server"]
    return httpx.AsyncClient(base_url=server, verify=False, headers={
        "Authorization": f"Bearer {created.status.token}"})  # fmt: skip


def gpu(name: str, node: str) -> dict[str, Any]:
    labels = {"tensor-fusion.ai/managed-by": node}
    return {"apiVersion": "tensor-fusion.ai/v1", "kind": "GPU",
            "metadata": {"name": name, "labels": labels}}  # fmt: skip


async def test_an_agent_writes_only_its_own_nodes_objects(
    control_plane: ControlPlane,
    kube: AsyncClient,
    release: Release,
    fake_gpu_nodes: FakeGpuNodes,
    cluster_objects: DeleteLater,
) -> None:
    await install_crds(control_plane)
    mine, theirs = [n.metadata.name for n in await fake_gpu_nodes(2) if n.metadata]
    assert mine and theirs
    pod = await kube.create(Pod.from_dict({  # type: ignore[no-untyped-call]
        "metadata": {"name": "agent", "namespace": release.namespace},
        "spec": {"nodeName": mine, "serviceAccountName": AGENT,
                 "containers": [{"name": "agent", "image": "agent"}]},
    }))  # fmt: skip
    run = secrets.token_hex(3)
    own, other = f"gpu-{run}-own", f"gpu-{run}-other"
    for name in (own, other):
        cluster_objects(GPU, name)
    path = "/apis/tensor-fusion.ai/v1/gpus"
    async with await agent_client(control_plane, kube, release, pod) as agent:

        async def policy_active() -> httpx.Response | None:
            # The policy takes effect a moment after it is created.
            reply = await agent.post(path, json=gpu(other, theirs))
            return reply if reply.status_code in (403, 422) else None

        refused = await eventually(policy_active, what="the agent policy refusing")
        assert f"may write only GPUs labelled tensor-fusion.ai/managed-by={mine}" in refused.text
        created = await agent.post(path, json=gpu(own, mine))
        assert created.status_code == 201, created.text
        relabel = {"metadata": {"labels": {"tensor-fusion.ai/managed-by": theirs}}}
        merge = {"Content-Type": "application/merge-patch+json"}
        moved = await agent.patch(f"{path}/{own}", json=relabel, headers=merge)
        assert moved.status_code in (403, 422), moved.text
        heartbeat = await agent.patch(
            f"/apis/tensor-fusion.ai/v1/gpunodes/{theirs}/status",
            json={"status": {}},
            headers=merge,
        )
        assert heartbeat.status_code in (403, 404, 422), heartbeat.text
    async with await agent_client(control_plane, kube, release, None) as unbound:
        reply = await unbound.delete(f"{path}/{own}")
        assert reply.status_code in (403, 422), reply.text
        assert "must be bound to a pod on a node" in reply.text
