"""The release's certificate a replica serves (deployment.md §7), kept from its Secret: the
webhook's HTTPS site and the peer port serve it, peers verify each other with its CA. It is
kept whether or not the webhook is enabled (`webhook_configuration` None: no caBundle to keep).

`WebhookCertificates.refresh()` makes the Secret hold a usable certificate and loads it:
absent, this replica issues one and creates the Secret (a replica that loses the creation race
reads the winner's); issued by the controller and two thirds through its life, it is renewed
with the same CA (a conflict means another replica renewed it: read again); from elsewhere
(cert-manager, the reference's Jobs) it is only read. Every refresh keeps the `caBundle` of the
MutatingWebhookConfiguration's webhooks equal to the Secret's CA (left alone without a CA, for
cert-manager's injector), and warns while auto-migration is on but the configuration still
selects pods by label (the pods it should migrate never reach the webhook). `run()` refreshes
every `interval_s` until cancelled, so a changed Secret is served without a restart; `ready`
says whether a certificate is loaded (`/readyz`). Every API call is retried on the next
round; failures are logged and counted, never raised.
"""

from __future__ import annotations

import asyncio
import base64
import datetime
import logging
import ssl
from collections.abc import Callable, Sequence
from typing import Any, Final

from lightkube import ApiError, AsyncClient
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import MutatingWebhookConfiguration
from lightkube.resources.core_v1 import Secret
from lightkube.types import PatchType

from tensorfusion.adapters.tls.webhook_certificates import (
    CertificateBundle,
    CertificateDataError,
    issue,
    load_into,
    missing_hosts,
    read_secret,
    renewal_due,
    secret_data,
    server_context,
    service_hosts,
)

__all__ = ["ISSUED_BY_ANNOTATION", "WebhookCertificates"]

_log = logging.getLogger(__name__)
ISSUED_BY_ANNOTATION: Final = "tensor-fusion.ai/issued-by"
REFRESH_INTERVAL_S: Final = 30.0
SELECTOR_WARNING_EVERY_S: Final = 600.0


def _utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)


class WebhookCertificates:
    """The Secret's certificate, loaded into one SSL context, and the caBundle kept in step."""

    def __init__(
        self,
        client: AsyncClient,
        *,
        namespace: str,
        secret_name: str,
        service_name: str,
        webhook_configuration: str | None,
        extra_hosts: Sequence[str] = (),
        identity: str = "tensor-fusion-controller",
        interval_s: float = REFRESH_INTERVAL_S,
        clock: Callable[[], datetime.datetime] = _utc_now,
    ) -> None:
        self._client = client
        self._namespace = namespace
        self._secret = secret_name
        self._service = service_name
        self._configuration = webhook_configuration
        self._extra_hosts = tuple(extra_hosts)
        self._hosts = service_hosts(service_name, namespace, self._extra_hosts)
        self._loaded_event = asyncio.Event()
        self._identity = identity
        self._interval = interval_s
        self._clock = clock
        self._loaded: CertificateBundle | None = None
        self.context: ssl.SSLContext | None = None
        self.failures = 0
        self.last_error = ""
        self.auto_migration = False
        self._selector_warned_at: datetime.datetime | None = None

    @property
    def ready(self) -> bool:
        """Whether a certificate is loaded (the webhook can serve)."""
        return self.context is not None

    @property
    def bundle(self) -> CertificateBundle | None:
        """The certificate being served."""
        return self._loaded

    def ca_pem(self) -> bytes | None:
        """The CA of the certificate being served (None before one is loaded or without one)."""
        return None if self._loaded is None else self._loaded.ca_pem

    async def wait_loaded(self) -> ssl.SSLContext:
        """The serving context, once a certificate is loaded."""
        await self._loaded_event.wait()
        assert self.context is not None
        return self.context

    async def run(self) -> None:
        """Refresh now and every `interval_s` until cancelled."""
        while True:
            await self.refresh()
            await asyncio.sleep(self._interval)

    async def refresh(self) -> bool:
        """One round: the Secret made usable, loaded, the caBundle synced; False on failure."""
        try:
            bundle = await self._usable_bundle()
            self._load(bundle)
            await self._sync_ca_bundle(bundle)
        except (ApiError, CertificateDataError, OSError) as error:
            self.failures += 1
            self.last_error = str(getattr(getattr(error, "status", None), "message", "") or error)
            _log.warning("webhook certificate from Secret %s/%s: %s", self._namespace,
                         self._secret, self.last_error)  # fmt: skip
            return False
        self.last_error = ""
        return True

    # ---- the Secret ------------------------------------------------------------------------

    async def _read(self) -> tuple[Secret | None, CertificateBundle | None]:
        try:
            secret = await self._client.get(Secret, self._secret, namespace=self._namespace)
        except ApiError as error:
            if error.status.code == 404:
                return None, None
            raise
        return secret, read_secret(secret.data)

    async def _usable_bundle(self) -> CertificateBundle:
        secret, bundle = await self._read()
        now = self._clock()
        if secret is None or bundle is None:
            return await self._create(secret, now)
        if renewal_due(bundle, now, self._hosts):
            renewed = issue(self._service, self._namespace, now,
                            extra_hosts=self._extra_hosts, ca=bundle)  # fmt: skip
            secret.data = secret_data(renewed)
            try:
                await self._client.replace(secret)
            except ApiError as error:
                if error.status.code != 409:
                    raise
                _, bundle = await self._read()  # another replica renewed it first
                if bundle is None:
                    raise
                return bundle
            _log.info("webhook certificate renewed in Secret %s/%s (valid until %s)",
                      self._namespace, self._secret,
                      renewed.certificate.not_valid_after_utc.isoformat())  # fmt: skip
            return renewed
        return bundle

    async def _create(self, existing: Secret | None, now: datetime.datetime) -> CertificateBundle:
        issued = issue(self._service, self._namespace, now, extra_hosts=self._extra_hosts)
        if existing is not None:
            # The Secret exists without a certificate (made empty for cert-manager, say):
            # fill it, with its resourceVersion as the precondition.
            existing.data = {**(existing.data or {}), **secret_data(issued)}
            await self._client.replace(existing)
            return issued
        secret = Secret(
            metadata=ObjectMeta(name=self._secret, namespace=self._namespace,
                                annotations={ISSUED_BY_ANNOTATION: self._identity}),
            type="kubernetes.io/tls", data=secret_data(issued),
        )  # fmt: skip
        try:
            await self._client.create(secret)
        except ApiError as error:
            if error.status.code != 409:
                raise
            _, winner = await self._read()  # lost the race: serve the winner's
            if winner is None:
                raise
            return winner
        _log.info("webhook certificate issued into Secret %s/%s", self._namespace, self._secret)
        return issued

    def _load(self, bundle: CertificateBundle) -> None:
        if self._loaded == bundle and self.context is not None:
            return
        if self.context is None:
            self.context = server_context(bundle)
        else:
            load_into(self.context, bundle)
        self._loaded = bundle
        self._loaded_event.set()
        missing = missing_hosts(bundle, self._hosts)
        if missing:
            _log.warning("the certificate in Secret %s/%s does not name %s: peers and callers "
                         "that use those names cannot verify it", self._namespace, self._secret,
                         ", ".join(missing))  # fmt: skip
        _log.info("serving certificate loaded (valid until %s)",
                  bundle.certificate.not_valid_after_utc.isoformat())  # fmt: skip

    # ---- the caBundle ----------------------------------------------------------------------

    async def _sync_ca_bundle(self, bundle: CertificateBundle) -> None:
        if bundle.ca_pem is None or self._configuration is None:
            return
        wanted = base64.b64encode(bundle.ca_pem).decode()
        try:
            configuration = await self._client.get(MutatingWebhookConfiguration,
                                                   self._configuration)  # fmt: skip
        except ApiError as error:
            if error.status.code == 404:
                return  # not installed (yet): nothing to keep in step
            raise
        webhooks = configuration.webhooks or []
        self._check_object_selector(webhooks)
        if all(w.clientConfig.caBundle == wanted for w in webhooks):
            return
        patch: list[dict[str, Any]] = [
            {"op": "add", "path": f"/webhooks/{i}/clientConfig/caBundle", "value": wanted}
            for i in range(len(webhooks))
        ]
        await self._client.patch(MutatingWebhookConfiguration, self._configuration, patch,
                                 patch_type=PatchType.JSON)  # fmt: skip
        _log.info("caBundle of MutatingWebhookConfiguration %s set to the Secret's CA",
                  self._configuration)  # fmt: skip

    def _check_object_selector(self, webhooks: Sequence[Any]) -> None:
        """Warn (every 10 min) while auto-migration is on and a webhook selects by label."""
        selecting = [
            w.name for w in webhooks
            if w.objectSelector is not None
            and (w.objectSelector.matchLabels or w.objectSelector.matchExpressions)
        ]  # fmt: skip
        if not self.auto_migration or not selecting:
            self._selector_warned_at = None
            return
        now = self._clock()
        last = self._selector_warned_at
        if last is not None and (now - last).total_seconds() < SELECTOR_WARNING_EVERY_S:
            return
        self._selector_warned_at = now
        _log.warning(
            "dynamic config autoMigration.enable is true but MutatingWebhookConfiguration %s "
            "still has an objectSelector on %s: pods without the label tensor-fusion.ai/enabled "
            "never reach the webhook and are not migrated; install with "
            "dynamicConfig.autoMigration.enable=true so the chart renders a namespaceSelector "
            "instead", self._configuration, ", ".join(selecting),
        )  # fmt: skip
