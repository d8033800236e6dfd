"""Fixtures of the cluster tier: a real control plane on loopback (see controlplane.py).

- ``control_plane`` (session): etcd, kube-apiserver, kube-controller-manager, started once;
  fails with the reason (never skips) when the binaries are missing: run ``make testenv``.
- ``kubeconfig``: path of the admin kubeconfig (group system:masters).
- ``kube``: a lightkube ``AsyncClient`` for the test.
- ``namespace``: a fresh namespace per test, deleted afterwards.
- ``fake_gpu_nodes``: makes fake GPU nodes, deleted afterwards.
- ``replicas``: starts ``tensor-fusion controller`` replicas in the test namespace.
- ``cluster_objects``: remembers cluster-scoped objects a test creates and deletes them
  afterwards, so that a failed test leaves no pool or GPU behind for the next.
- ``start_scheduler``: starts kube-scheduler with a given KubeSchedulerConfiguration;
  ``kube_scheduler``: the default one.
- component logs: the part of each log written during a test is copied to the test's
  ``tmp_path/component-logs`` and printed when the test fails.
"""

from __future__ import annotations

import contextlib
import re
import secrets
from collections.abc import AsyncIterator, Callable, Generator, Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, AsyncClient, KubeConfig
from lightkube.models.core_v1 import Node as NodeModel
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node, Pod, ServiceAccount
from lightkube.types import PatchType

from .controller_replicas import Start, started_replicas
from .controlplane import Binaries, Component, ControlPlane, StartScheduler, eventually
from .nodes import FakeGpuNodes, create_fake_gpu_node

_PLANE = pytest.StashKey[ControlPlane]()
_LOGBOOK = pytest.StashKey["LogBook"]()
_TAIL_LINES = 80


class LogBook:
    """Remembers where each component log stood when a test began."""

    def __init__(self) -> None:
        self._offsets: dict[str, tuple[Path, int]] = {}

    def watch(self, name: str, path: Path, *, from_start: bool = False) -> None:
        offset = 0 if from_start or not path.exists() else path.stat().st_size
        self._offsets[name] = (path, offset)

    def written(self) -> dict[str, tuple[Path, str]]:
        """What each log received since it was watched."""
        result: dict[str, tuple[Path, str]] = {}
        for name, (path, offset) in self._offsets.items():
            try:
                with path.open("rb") as log:
                    log.seek(offset)
                    result[name] = (path, log.read().decode(errors="replace"))
            except FileNotFoundError:
                continue
        return result

    def copy_to(self, directory: Path) -> None:
        """Writes each log's part into ``directory`` (logs already beside it are left alone)."""
        directory.mkdir(parents=True, exist_ok=True)
        for name, (path, text) in self.written().items():
            if path.parent != directory.parent:
                (directory / f"{name}.log").write_text(text)


# --------------------------------------------------------------------------- session plane


@pytest.fixture(scope="session")
def control_plane(
    tmp_path_factory: pytest.TempPathFactory, pytestconfig: pytest.Config
) -> Iterator[ControlPlane]:
    """The session's control plane. Raises MissingBinariesError if `make testenv` has not run."""
    plane = ControlPlane(Binaries.locate(), tmp_path_factory.mktemp("controlplane"))
    plane.start()
    pytestconfig.stash[_PLANE] = plane
    try:
        yield plane
    finally:
        plane.stop()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    plane = config.stash.get(_PLANE, None)
    if plane is not None:
        terminalreporter.write_line(
            f"testenv: control plane {plane.binaries.kubernetes_version} (etcd, kube-apiserver, "
            f"kube-controller-manager) was ready in {plane.startup_seconds:.1f}s; "
            f"logs in {plane.log_dir}"
        )


@pytest.fixture(autouse=True)
def component_logs(
    request: pytest.FixtureRequest, control_plane: ControlPlane, tmp_path: Path
) -> Iterator[LogBook]:
    """Keeps the logs written during the test in its tmp_path; printed if the test fails."""
    control_plane.ensure_running()
    book = LogBook()
    for name, path in control_plane.logs.items():
        book.watch(name, path)
    request.node.stash[_LOGBOOK] = book
    yield book
    book.copy_to(tmp_path / "component-logs")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    book = item.stash.get(_LOGBOOK, None)
    if report.failed and book is not None:
        for name, (path, text) in book.written().items():
            lines = text.splitlines()
            shown = "\n".join(lines[-_TAIL_LINES:])
            cut = f"last {_TAIL_LINES} of {len(lines)} lines" if len(lines) > _TAIL_LINES else ""
            title = f"{name} log during this test ({path}{'; ' + cut if cut else ''})"
            report.sections.append((title, shown or "(nothing written)"))
    return report


# --------------------------------------------------------------------------- clients


@pytest.fixture
def kubeconfig(control_plane: ControlPlane) -> Path:
    return control_plane.kubeconfig


@pytest.fixture
async def kube(control_plane: ControlPlane) -> AsyncIterator[AsyncClient]:
    client = AsyncClient(
        KubeConfig.from_file(control_plane.kubeconfig), field_manager="tensor-fusion-tests"
    )
    try:
        yield client
    finally:
        await client.close()


def _namespace_name(test_name: str) -> str:
    stem = re.sub(r"[^a-z0-9-]+", "-", test_name.lower()).strip("-")[:40].strip("-")
    return f"t-{stem}-{secrets.token_hex(3)}"


@pytest.fixture
async def namespace(request: pytest.FixtureRequest, kube: AsyncClient) -> AsyncIterator[str]:
    """A fresh namespace with its ``default`` ServiceAccount; deleted (pods forced) afterwards."""
    name = _namespace_name(request.node.name)
    await kube.create(Namespace(metadata=ObjectMeta(name=name)))

    async def default_account() -> bool:
        try:
            await kube.get(ServiceAccount, "default", namespace=name)
        except ApiError as error:
            if error.status.code == 404:
                return False
            raise
        return True

    await eventually(default_account, what=f"ServiceAccount default in namespace {name}")
    try:
        yield name
    finally:
        await kube.delete(Namespace, name)
        # Finalizers of pods whose controller has stopped would keep them (and the namespace)
        # Terminating, and visible to later tests that look at every pod.
        async for pod in kube.list(Pod, namespace=name):
            if pod.metadata and pod.metadata.finalizers and pod.metadata.name:
                with contextlib.suppress(ApiError):
                    await kube.patch(Pod, pod.metadata.name, {"metadata": {"finalizers": None}},
                                     namespace=name, patch_type=PatchType.MERGE)  # fmt: skip
        # No kubelet confirms the deletion of a pod bound to a node: without grace period 0
        # such pods, and so the namespace, would stay Terminating.
        await kube.deletecollection(Pod, namespace=name, grace_period=0)


@pytest.fixture
async def replicas(
    control_plane: ControlPlane, kube: AsyncClient, namespace: str, tmp_path: Path
) -> AsyncIterator[Start]:
    """``replicas("name", *flags)`` starts a controller replica; all are stopped afterwards."""
    async with started_replicas(control_plane, kube, namespace, tmp_path) as start:
        yield start


DeleteLater = Callable[[Any, str], None]


@pytest.fixture
async def cluster_objects(kube: AsyncClient) -> AsyncIterator[DeleteLater]:
    """``cluster_objects(resource, name)``: the object is deleted after the test (last first)."""
    tracked: list[tuple[Any, str]] = []
    try:
        yield lambda resource, name: tracked.append((resource, name))
    finally:
        for resource, name in reversed(tracked):
            try:
                await kube.delete(resource, name)
            except ApiError as error:
                if error.status.code != 404:
                    raise


@pytest.fixture
async def fake_gpu_nodes(
    request: pytest.FixtureRequest, kube: AsyncClient
) -> AsyncIterator[FakeGpuNodes]:
    """``await fake_gpu_nodes(2, gpus=8)`` creates Ready GPU nodes named after the test.

    ``options`` go to ``nodes.create_fake_gpu_node``. The nodes are deleted after the test.
    """
    created: list[str] = []
    prefix = _namespace_name(request.node.name).replace("t-", "gpu-", 1)

    async def make(count: int = 1, **options: Any) -> list[NodeModel]:
        nodes = []
        for _ in range(count):
            name = f"{prefix}-{len(created)}"
            created.append(name)
            nodes.append(await create_fake_gpu_node(kube, name, **options))
        return nodes

    try:
        yield make
    finally:
        for name in created:
            try:
                await kube.delete(Node, name)
            except ApiError as error:
                if error.status.code != 404:
                    raise


# --------------------------------------------------------------------------- kube-scheduler


@pytest.fixture
async def start_scheduler(
    control_plane: ControlPlane, tmp_path: Path, component_logs: LogBook
) -> AsyncIterator[StartScheduler]:
    """``await start_scheduler(configuration=None, *, profiles=None, extenders=None)``.

    Starts kube-scheduler with a KubeSchedulerConfiguration: ``configuration`` as the base,
    ``profiles`` and ``extenders`` (see ``controlplane.http_extender``) replacing its lists;
    the kubeconfig and ``leaderElect: false`` are filled in. Its log and config file are in
    the test's tmp_path. It is stopped (by its PID) after the test.
    """
    started: list[Component] = []

    async def start(
        configuration: Mapping[str, Any] | None = None,
        *,
        profiles: list[Mapping[str, Any]] | None = None,
        extenders: list[Mapping[str, Any]] | None = None,
    ) -> Component:
        name = "kube-scheduler" if not started else f"kube-scheduler-{len(started)}"
        config = control_plane.scheduler_configuration(
            base=configuration, profiles=profiles, extenders=extenders
        )
        component_logs.watch(name, tmp_path / f"{name}.log", from_start=True)
        scheduler = await control_plane.start_scheduler(config, tmp_path, name=name)
        started.append(scheduler)
        return scheduler

    try:
        yield start
    finally:
        for scheduler in reversed(started):
            scheduler.stop()


@pytest.fixture
async def kube_scheduler(start_scheduler: StartScheduler) -> Component:
    """kube-scheduler with the default profile (``default-scheduler``) and no extender."""
    return await start_scheduler()
