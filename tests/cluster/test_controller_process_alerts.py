"""Two `tensor-fusion controller` processes with `-enable-alert` and three real Alertmanagers on
127.0.0.2-4 (`-alert-manager-addr`; the headless-Service resolver is covered by the
integration tier): a node agent's rows written through the follower reach the leader's
embedded store and fire a rule on them at every Alertmanager; after a `kill -9` of the leader
the new one continues from the ConfigMap state with no duplicate and no false resolution."""

from __future__ import annotations

import os
from datetime import datetime
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest
import yaml
from lightkube import ApiError, AsyncClient
from lightkube.models.authentication_v1 import TokenRequestSpec
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap, ServiceAccount, ServiceAccountToken
from prometheus_client.parser import text_string_to_metric_families

from tensorfusion.api_server import METRICS_WRITE_PATH
from tensorfusion.domain.settings.controller_environment import (
    DEFAULT_HYPERVISOR_SERVICE_ACCOUNT,
    DEFAULT_RELEASE,
)

from ..integration.loopback_peers import WebhookReceiver, alertmanagers_on
from .controller_replicas import Replica, Start, holder, install_crds
from .controlplane import ControlPlane, eventually

pytestmark = pytest.mark.cluster

ADDRESSES = ("127.0.0.2", "127.0.0.3", "127.0.0.4")
ROW = "tf_gpu_usage,node=node-it,uuid=GPU-IT compute_percentage=99.5 {ts}\n"


def write_rules(directory: Path) -> Path:
    common = {"evaluationInterval": "1s", "consecutiveCount": 2, "severity": "P2",
              "alertTargetInstance": "{{ .node }}"}  # fmt: skip
    rules = [
        {"name": "AlwaysFiring", "query": "SELECT 'node-a' AS node", **common},
        {"name": "AgentRow", "query": "SELECT node FROM tf_gpu_usage WHERE uuid = 'GPU-IT'",
         **common},
    ]  # fmt: skip
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(yaml.safe_dump({"alertRules": rules}))
    os.replace(temporary, directory / "config.yaml")
    return directory / "config.yaml"


def notices(receiver: WebhookReceiver, rule: str, status: str) -> list[dict[str, Any]]:
    return [a for a in receiver.alerts(status) if a["labels"].get("alertname") == rule]


async def service_account_token(kube: AsyncClient, namespace: str, name: str) -> str:
    """A token of a new ServiceAccount, from the TokenRequest API (as a pod gets it)."""
    await kube.create(ServiceAccount(metadata=ObjectMeta(name=name, namespace=namespace)))
    request = ServiceAccountToken(
        metadata=ObjectMeta(name=name, namespace=namespace),
        spec=TokenRequestSpec(audiences=[], expirationSeconds=3600),
    )
    created = await kube.create(request, name=name, namespace=namespace)
    assert created.status is not None
    token = created.status.token
    assert token
    return token


async def post_rows(replica: Replica, body: str, token: str | None) -> tuple[int, str]:
    headers = {"Content-Type": "text/plain; charset=utf-8"}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    url = replica.url(METRICS_WRITE_PATH) + "?db=public&precision=ms"
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, data=body, headers=headers) as reply,
    ):
        return reply.status, await reply.text()


async def evaluations(replica: Replica, rule: str) -> float:
    try:
        code, text = await replica.get("/metrics", metrics=True)
    except aiohttp.ClientError:
        return 0.0
    if code != 200:
        return 0.0
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if (
                sample.name == "tf_alert_evaluations_total"
                and sample.labels.get("rule") == rule
                and sample.labels.get("result") == "ok"
            ):
                return float(sample.value)
    return 0.0


async def saved_firing(kube: AsyncClient, namespace: str) -> list[dict[str, Any]]:
    try:
        found = await kube.get(ConfigMap, f"{DEFAULT_RELEASE}-alert-state", namespace=namespace)
    except ApiError as error:
        if error.status.code == 404:
            return []
        raise
    text = (found.data or {}).get("state.json")
    firing: list[dict[str, Any]] = orjson.loads(text)["firing"] if text else []
    return firing


async def test_agent_rows_through_the_follower_fire_and_alerts_survive_a_kill_9(
    control_plane: ControlPlane,
    kube: AsyncClient,
    namespace: str,
    replicas: Start,
    tmp_path: Path,
) -> None:
    await install_crds(control_plane)
    token = await service_account_token(kube, namespace, DEFAULT_HYPERVISOR_SERVICE_ACCOUNT)
    config_dir = tmp_path / "config"
    config_dir.mkdir()
    config = write_rules(config_dir)
    async with alertmanagers_on(ADDRESSES, tmp_path / "alertmanagers") as peers:
        urls = ",".join(f"http://{host}:{peers.port}" for host in ADDRESSES)
        flags = ("-leader-elect", "-enable-alert", "-dynamic-config", str(config),
                 "-alert-manager-addr", urls)  # fmt: skip
        first = replicas("replica-h", *flags)

        async def first_leads() -> bool:
            return await holder(kube, namespace) == "replica-h"

        await eventually(first_leads, what="replica-h to lead", components=[first.component])
        second = replicas("replica-i", *flags)
        both = [first.component, second.component]

        # -- the follower forwards the agent's write; a write without a token is refused --
        async def written() -> bool:
            try:
                code, _ = await post_rows(second, ROW.format(ts=1_700_000_000_000), token)
            except aiohttp.ClientError:
                return False
            return code == 204

        await eventually(written, what="the agent's row written through the follower",
                         components=both)  # fmt: skip
        code, text = await post_rows(second, ROW.format(ts=1_700_000_000_001), None)
        assert code == 401 and "Bearer" in text
        code, text = await post_rows(second, "tf_gpu_usage,node=x\n", token)
        assert code == 400 and "line 1" in text

        # -- both rules fire at all three Alertmanagers ------------------------------------
        async def all_notified() -> bool:
            return all(notices(r, rule, "firing") for r in peers.receivers
                       for rule in ("AlwaysFiring", "AgentRow"))  # fmt: skip

        await eventually(all_notified, what="both alerts at the three Alertmanagers",
                         components=both)  # fmt: skip
        starts_at = {notices(r, "AlwaysFiring", "firing")[0]["startsAt"] for r in peers.receivers}
        assert len(starts_at) == 1

        async def state_saved() -> bool:
            return {f["rule"] for f in await saved_firing(kube, namespace)} == {
                "AlwaysFiring", "AgentRow"}  # fmt: skip

        await eventually(state_saved, what="the firing set in the ConfigMap", components=both)

        # -- kill -9 of the leader: the follower continues from the saved state --------------
        first.component.kill()

        async def second_evaluated() -> bool:
            leads = await holder(kube, namespace) == "replica-i"
            return leads and await evaluations(second, "AlwaysFiring") >= 3

        await eventually(second_evaluated, what="replica-i leading and evaluating 3 times",
                         components=[second.component])  # fmt: skip
        for receiver in peers.receivers:
            assert len(notices(receiver, "AlwaysFiring", "firing")) == 1, "a duplicate"
            assert notices(receiver, "AlwaysFiring", "resolved") == [], "a false resolution"
        [always] = [f for f in await saved_firing(kube, namespace) if f["rule"] == "AlwaysFiring"]
        assert always["startsAt"] in {_ms(s) for s in starts_at}, "restored, not fired anew"


def _ms(rfc3339: str) -> int:
    """Milliseconds since the epoch of an Alertmanager `startsAt`."""
    return int(datetime.fromisoformat(rfc3339.replace("Z", "+00:00")).timestamp() * 1000)
