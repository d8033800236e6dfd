"""`live.webhook`: the MutatingWebhookConfiguration exists, its caBundle validates the serving
certificate, and its failurePolicy and selectors match the values (deployment.md §3.2, §7).

The serving certificate is the one in the Secret named by the controller Deployment's
`WEBHOOK_SECRET_NAME` (keys `tls.crt`/`ca.crt` or `cert`/`ca`); it must chain to a CA of the
caBundle (through intermediates in the Secret's chain, if any), be within its validity, and
name the host the API server calls (`<service>.<namespace>.svc`, or the host of a `url`).
Without values, the failurePolicy and selectors are reported (WARN on `Ignore`).
"""

from __future__ import annotations

import base64
import binascii
import datetime
import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any, Final
from urllib.parse import urlsplit

from cryptography import x509
from cryptography.exceptions import InvalidSignature

from tensorfusion.doctor.live_context import ApiCallError, CheckOutcome, LiveContext, dig
from tensorfusion.domain.doctor.results import Status

__all__ = ["chain_problems", "check_webhook", "webhook_command"]

DEFAULT_SECRET: Final = "tensor-fusion-webhook-secret"
_ENABLED_LABEL: Final = "tensor-fusion.ai/enabled"
_SEVERITY: Final = {Status.PASS: 0, Status.WARN: 1, Status.SKIP: 2, Status.FAIL: 3}


def webhook_command(ctx: LiveContext) -> str:
    """The kubectl command showing the webhook configuration."""
    return f"kubectl get mutatingwebhookconfiguration {ctx.webhook_name} -o yaml"


# ---- the certificate -----------------------------------------------------------------------


def _issued_by(cert: x509.Certificate, issuer: x509.Certificate) -> bool:
    try:
        cert.verify_directly_issued_by(issuer)
    except (ValueError, TypeError, InvalidSignature):
        return False
    return True


def _chains(
    leaf: x509.Certificate,
    intermediates: Sequence[x509.Certificate],
    roots: Sequence[x509.Certificate],
) -> bool:
    current, pool = leaf, list(intermediates)
    while True:
        if any(_issued_by(current, root) for root in roots):
            return True
        parent = next((c for c in pool if _issued_by(current, c)), None)
        if parent is None:
            return False
        pool.remove(parent)
        current = parent


def _names(cert: x509.Certificate, host: str) -> bool:
    try:
        alt = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        dns = [name.lower() for name in alt.get_values_for_type(x509.DNSName)]
        wildcard = "*." + host.split(".", 1)[-1].lower()
        return host.lower() in dns or ("." in host and wildcard in dns)
    return address in alt.get_values_for_type(x509.IPAddress)


def _subject(cert: x509.Certificate) -> str:
    return cert.subject.rfc4514_string() or "(empty subject)"


def chain_problems(
    cert_pem: bytes, bundle_pem: bytes, host: str, now: datetime.datetime
) -> tuple[list[str], str]:
    """What is wrong between a serving certificate (PEM, leaf first) and a caBundle (PEM) for
    `host` at `now`, and a description of the certificate."""
    try:
        chain = x509.load_pem_x509_certificates(cert_pem)
    except ValueError as error:
        return [f"the serving certificate is not PEM: {error}"], ""
    try:
        roots = x509.load_pem_x509_certificates(bundle_pem)
    except ValueError as error:
        return [f"the caBundle is not PEM certificates: {error}"], ""
    leaf, problems = chain[0], []
    if not _chains(leaf, chain[1:], roots):
        problems.append(
            f"the caBundle ({', '.join(_subject(r) for r in roots)}) does not "
            f"validate the serving certificate (issued by {leaf.issuer.rfc4514_string()})"
        )
    if leaf.not_valid_after_utc < now:
        problems.append(f"the serving certificate expired on {leaf.not_valid_after_utc:%Y-%m-%d}")
    if leaf.not_valid_before_utc > now:
        problems.append("the serving certificate is not valid yet")
    if host and not _names(leaf, host):
        problems.append(f"the serving certificate does not name {host}")
    described = f"valid until {leaf.not_valid_after_utc:%Y-%m-%d}" + (
        f", names {host}" if host else ""
    )
    return problems, described


def _decode(data: Mapping[str, Any], *keys: str) -> bytes | None:
    for key in keys:
        if data.get(key):
            try:
                return base64.b64decode(str(data[key]), validate=True)
            except (binascii.Error, ValueError):
                return None
    return None


def _host(hook: Mapping[str, Any]) -> str:
    """The host the API server calls for `hook`."""
    config = hook.get("clientConfig") or {}
    if config.get("url"):
        return urlsplit(str(config["url"])).hostname or ""
    service = config.get("service") or {}
    return f"{service.get('name')}.{service.get('namespace')}.svc" if service else ""


async def _certificate(ctx: LiveContext, hooks: Sequence[Mapping[str, Any]]) -> CheckOutcome:
    secret_name = (
        await ctx.controller_env("WEBHOOK_SECRET_NAME")
        or dig(ctx.values, "controller", "admissionWebhooks", "secretName")
        or DEFAULT_SECRET
    )
    where = f"Secret {ctx.namespace}/{secret_name}"
    try:
        secret = await ctx.get(f"/api/v1/namespaces/{ctx.namespace}/secrets/{secret_name}")
    except ApiCallError as error:
        if error.code not in (401, 403):
            raise
        return CheckOutcome(Status.SKIP, f"caBundle not verified: not permitted to read {where}")
    if secret is None:
        return CheckOutcome(
            Status.FAIL,
            f"no {where}: the controller creates it when it starts",
            f"kubectl logs -n {ctx.namespace} deploy/{ctx.deployment_name} -c controller",
        )
    data = secret.get("data") or {}
    cert_pem, ca_pem = _decode(data, "tls.crt", "cert"), _decode(data, "ca.crt", "ca")
    if cert_pem is None:
        return CheckOutcome(Status.FAIL, f"{where} holds no readable tls.crt or cert")
    problems: list[str] = []
    described = ""
    for hook in hooks:
        try:
            bundle = base64.b64decode(str(hook.get("clientConfig", {}).get("caBundle") or ""))
        except (binascii.Error, ValueError):
            bundle = b""
        if not bundle:
            problems.append(f"webhook {hook.get('name')} has no caBundle")
            continue
        found, described = chain_problems(cert_pem, bundle, _host(hook), ctx.clock())
        problems += [f"webhook {hook.get('name')}: {problem}" for problem in found]
    if problems:
        same = ca_pem is not None and all(
            base64.b64decode(str(h.get("clientConfig", {}).get("caBundle") or "")) == ca_pem
            for h in hooks
        )
        fix = (
            f"the controller keeps the caBundle equal to the CA of {where} (deployment.md §7): "
            f"check that it runs (kubectl logs -n {ctx.namespace} deploy/{ctx.deployment_name} "
            "-c controller)"
            + ("" if same else "; the caBundle differs from that CA")
            + "; with cert-manager, check its CA injector"
        )
        return CheckOutcome(Status.FAIL, "; ".join(problems), fix)
    return CheckOutcome(
        Status.PASS, f"the caBundle validates the serving certificate of {where} ({described})"
    )


# ---- failurePolicy and selectors -------------------------------------------------------------


def _expressions(selector: Mapping[str, Any] | None) -> list[str]:
    selector = selector or {}
    found = [f"{k}={v}" for k, v in sorted((selector.get("matchLabels") or {}).items())]
    for item in selector.get("matchExpressions") or ():
        values = ", ".join(str(v) for v in item.get("values") or ())
        found.append(f"{item.get('key')} {item.get('operator')} [{values}]")
    return found


def _describe(hook: Mapping[str, Any]) -> str:
    objects, namespaces = (
        _expressions(hook.get("objectSelector")),
        _expressions(hook.get("namespaceSelector")),
    )
    text = f"objectSelector {'; '.join(objects)}" if objects else "no objectSelector"
    return text + (f", namespaceSelector {'; '.join(namespaces)}" if namespaces else "")


def _selectors_match(hook: Mapping[str, Any], migration: bool, namespace: str) -> bool:
    objects = hook.get("objectSelector") or {}
    if migration:
        skipped = [
            set(item.get("values") or ())
            for item in (hook.get("namespaceSelector") or {}).get("matchExpressions") or ()
            if item.get("key") == "kubernetes.io/metadata.name" and item.get("operator") == "NotIn"
        ]
        return not _expressions(objects) and any({"kube-system", namespace} <= s for s in skipped)
    labels = objects.get("matchLabels") or {}
    expressions = objects.get("matchExpressions") or ()
    return labels.get(_ENABLED_LABEL) == "true" or any(
        item.get("key") == _ENABLED_LABEL
        and item.get("operator") == "In"
        and list(item.get("values") or ()) == ["true"]
        for item in expressions
    )


def _policy(ctx: LiveContext, hooks: Sequence[Mapping[str, Any]]) -> list[CheckOutcome]:
    values = ctx.values
    found: list[CheckOutcome] = []
    for hook in hooks:
        policy = str(hook.get("failurePolicy") or "Fail")
        text = f"failurePolicy {policy}, {_describe(hook)}"
        upgrade = "helm upgrade with the same values files (Helm renders both)"
        if values is None:
            status = Status.WARN if policy == "Ignore" else Status.PASS
            fix = (
                "controller:\n  admissionWebhooks:\n    failurePolicy: Fail"
                if policy == "Ignore"
                else ""
            )
            found.append(CheckOutcome(status, text, fix))
            continue
        wanted = str(dig(values, "controller", "admissionWebhooks", "failurePolicy") or "Fail")
        migration = bool(
            dig(values, "controller", "nvidiaOperatorProgressiveMigration")
            or dig(values, "dynamicConfig", "autoMigration", "enable")
        )
        if policy != wanted:
            found.append(
                CheckOutcome(Status.FAIL, f"{text}; the values say failurePolicy {wanted}", upgrade)
            )
        elif not _selectors_match(hook, migration, ctx.namespace):
            mode = "migration mode" if migration else "normal mode"
            found.append(CheckOutcome(Status.FAIL, f"{text}; the values select {mode}", upgrade))
        else:
            found.append(CheckOutcome(Status.PASS, f"{text}, as the values say"))
    return found


async def check_webhook(ctx: LiveContext) -> CheckOutcome:
    """The webhook configuration, its caBundle against the serving certificate, its policy."""
    path = f"/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{ctx.webhook_name}"
    configuration = await ctx.get(path)
    if configuration is None:
        return CheckOutcome(
            Status.FAIL,
            f"no MutatingWebhookConfiguration {ctx.webhook_name}",
            "install or upgrade the chart (it renders the configuration)",
        )
    hooks = configuration.get("webhooks") or []
    if not hooks:
        return CheckOutcome(
            Status.FAIL,
            f"MutatingWebhookConfiguration {ctx.webhook_name} has no webhooks",
            "helm upgrade (the chart renders mpod.tensor-fusion.ai)",
        )
    parts = [await _certificate(ctx, hooks), *_policy(ctx, hooks)]
    status = max((part.status for part in parts), key=_SEVERITY.__getitem__)
    fixes = dict.fromkeys(part.fix for part in parts if part.fix and part.status != Status.PASS)
    return CheckOutcome(status, "; ".join(part.found for part in parts), "\n".join(fixes))
