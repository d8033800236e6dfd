"""The openb trace's CSV files (Alibaba cluster-trace-gpu-v2023) and its hardware table.

`openb_node_list_gpu_node.csv`: `sn, cpu_milli, memory_mib, gpu, model`;
`openb_pod_list_default.csv`: `name, cpu_milli, memory_mib, num_gpu, gpu_milli, gpu_spec, ...,
creation_time, deletion_time, ...`; the multi-GPU task lists carry only the first five columns:
`gpu_spec` is optional, `creation_time` and `deletion_time` are needed only to replay the list
as recorded. Every problem is an InputError naming the file, the line, the column, the value
and what is allowed; a file is read under a size and a row limit.
"""

from __future__ import annotations

import csv
import io
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final, TypeVar

from tensorfusion.sim.input_errors import InputError, read_file_bounded
from tensorfusion.sim.input_limits import (
    MAX_OPENB_FILE_BYTES,
    MAX_OPENB_NODES,
    MAX_TRACE_PODS,
)

__all__ = [
    "HARDWARE",
    "GPUModelFigures",
    "OpenbNode",
    "OpenbTask",
    "read_nodes",
    "read_tasks",
]

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class GPUModelFigures:
    """One row of the hardware table: dense fp16 tensor TFLOPs, VRAM, and where they come from."""

    fp16_tflops: str
    vram: str
    source: str


HARDWARE: Final[Mapping[str, GPUModelFigures]] = {
    "T4": GPUModelFigures("65", "16Gi", "NVIDIA T4 datasheet: 65 fp16 tensor TFLOPS, 16 GB"),
    "P100": GPUModelFigures("18.7", "16Gi", "NVIDIA P100 PCIe datasheet: 18.7 fp16 TFLOPS, 16 GB"),
    "V100M16": GPUModelFigures(
        "125", "16Gi", "NVIDIA V100 SXM2 datasheet: 125 tensor TFLOPS, 16 GB"
    ),
    "V100M32": GPUModelFigures(
        "125", "32Gi", "NVIDIA V100 SXM2 datasheet: 125 tensor TFLOPS, 32 GB"
    ),
    "A10": GPUModelFigures("125", "24Gi", "NVIDIA A10 datasheet: 125 fp16 tensor TFLOPS, 24 GB"),
    "G2": GPUModelFigures("125", "32Gi", "undisclosed; our choice: the V100M32 figures"),
    "G3": GPUModelFigures("125", "32Gi", "undisclosed; our choice: the V100M32 figures"),
}
"""The openb GPU models. G2 and G3 are undisclosed: they get the V100M32 figures. The trace's
GPU requests are shares of one card or whole cards, never TFLOPs or memory, so the figures
change no share a task takes; they set the report's TFLOPs and VRAM columns, and the
absolute-TFLOPs order in which the placement modes compare GPUs of different models."""

NODE_COLUMNS: Final = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
TASK_COLUMNS: Final = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
TIME_COLUMNS: Final = ("creation_time", "deletion_time")
"""Needed to replay the list as recorded (arrival and duration), not for workload inflation."""
MAX_GPUS_PER_TASK: Final = 128
MAX_DIGITS: Final = 18
"""Digits of an integer column (below 10^18: any CPU, memory or time the trace records)."""


@dataclass(frozen=True, slots=True)
class OpenbNode:
    """One GPU node of the trace."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str


@dataclass(frozen=True, slots=True)
class OpenbTask:
    """One task: CPU, memory, `num_gpu` cards, a share `gpu_milli`/1000 when it shares one."""

    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...]
    creation: int = 0
    deletion: int = 0

    @property
    def sharing(self) -> bool:
        """A share of one GPU (below a whole card)."""
        return self.num_gpu == 1 and self.gpu_milli < 1000

    @property
    def gpu_request(self) -> float:
        """The GPUs it asks for: the share of one card, or the number of whole cards."""
        return self.gpu_milli / 1000 if self.sharing else float(self.num_gpu)


class _Row:
    """One CSV row and how to report a bad value in it."""

    def __init__(self, path: Path, line: int, row: Mapping[str, str]) -> None:
        self.path, self.line, self.row = path, line, row

    def fail(self, column: str, allowed: str) -> InputError:
        value = self.row.get(column)
        return InputError(
            f"{self.path}: line {self.line}: column {column}: invalid value {value!r}: {allowed}"
        )

    def integer(self, column: str, low: int, high: int | None = None) -> int:
        text = (self.row.get(column) or "").strip()
        allowed = f"an integer >= {low}" + ("" if high is None else f" and <= {high}")
        digits = text.removeprefix("-")
        if not (digits.isascii() and digits.isdigit() and len(digits) <= MAX_DIGITS):
            raise self.fail(column, allowed)
        value = int(text)
        if value < low or (high is not None and value > high):
            raise self.fail(column, allowed)
        return value

    def text(self, column: str) -> str:
        value = (self.row.get(column) or "").strip()
        if not value:
            raise self.fail(column, "must not be empty")
        return value


def _text(path: Path, what: str) -> str:
    data = read_file_bounded(path, what, MAX_OPENB_FILE_BYTES)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise InputError(
            f"{path}: {what}: not UTF-8 text (byte {exc.start}): a binary file or another encoding"
        ) from None


def _rows(
    path: Path, columns: tuple[str, ...], what: str, max_rows: int
) -> tuple[tuple[str, ...], Iterator[_Row]]:
    """The file's header and its rows; the columns `columns` must be there."""
    reader = csv.DictReader(io.StringIO(_text(path, what), newline=""))
    try:
        header = tuple(reader.fieldnames or ())
    except csv.Error as exc:
        raise InputError(f"{path}: line 1: not valid CSV: {exc}") from None
    missing = [c for c in columns if c not in header]
    if missing:
        raise InputError(f"{path}: {what} lacks the column(s) {', '.join(missing)} (needed: "
                         f"{', '.join(columns)})")  # fmt: skip

    def rows() -> Iterator[_Row]:
        try:
            for count, row in enumerate(reader, start=1):
                if count > max_rows:
                    raise InputError(f"{path}: {what}: more than {max_rows:,} rows: the limit "
                                     f"is {max_rows:,} rows")  # fmt: skip
                yield _Row(path, reader.line_num, row)
        except csv.Error as exc:
            raise InputError(f"{path}: line {reader.line_num}: not valid CSV: {exc}") from None

    return header, rows()


def _checked(rows: Iterator[_Row], parse: Callable[[_Row], T], path: Path, what: str) -> list[T]:
    items = [parse(row) for row in rows]
    if not items:
        raise InputError(f"{path}: {what} has no rows")
    return items


def read_nodes(path: Path) -> list[OpenbNode]:
    """The node list; models must be in `HARDWARE` and node names unique."""
    models = ", ".join(HARDWARE)
    seen: set[str] = set()

    def parse(row: _Row) -> OpenbNode:
        model = row.text("model")
        if model not in HARDWARE:
            raise row.fail("model", f"allowed models are {models}")
        name = row.text("sn")
        if name in seen:
            raise row.fail("sn", "node names must be unique")
        seen.add(name)
        return OpenbNode(name, row.integer("cpu_milli", 1), row.integer("memory_mib", 1),
                         row.integer("gpu", 1, 128), model)  # fmt: skip

    what = "openb node list"
    _, rows = _rows(path, NODE_COLUMNS, what, MAX_OPENB_NODES)
    return _checked(rows, parse, path, what)


def read_tasks(path: Path, *, replay: bool = True) -> list[OpenbTask]:
    """The task list: shares on one card (`num_gpu` 1, `gpu_milli` 1-1000), whole cards
    (`gpu_milli` 1000), or no GPU (`num_gpu` 0); `gpu_spec` models from `HARDWARE`.
    `replay` (the list as recorded) needs `creation_time` and `deletion_time`."""
    models = ", ".join(HARDWARE)
    what = "openb task list"
    header, rows = _rows(path, TASK_COLUMNS, what, MAX_TRACE_PODS)
    missing = [c for c in TIME_COLUMNS if c not in header]
    if replay and missing:
        raise InputError(
            f"{path}: {what} lacks the column(s) {', '.join(missing)}, which replaying the list"
            " as recorded needs (arrival and duration); without them, use --inflate"
        )
    timed = not missing

    def parse(row: _Row) -> OpenbTask:
        num_gpu = row.integer("num_gpu", 0, MAX_GPUS_PER_TASK)
        gpu_milli = row.integer("gpu_milli", 0, 1000)
        if num_gpu == 1 and gpu_milli == 0:
            raise row.fail("gpu_milli", "a task with num_gpu 1 asks for 1 to 1000 (a whole card)")
        if num_gpu > 1 and gpu_milli != 1000:
            raise row.fail("gpu_milli", "a task with num_gpu > 1 takes whole cards: 1000")
        spec = tuple(m.strip() for m in (row.row.get("gpu_spec") or "").split("|") if m.strip())
        unknown = [m for m in spec if m not in HARDWARE]
        if unknown:
            raise row.fail("gpu_spec", f"allowed models ('|'-separated) are {models}")
        creation = row.integer("creation_time", 0) if timed else 0
        deletion = row.integer("deletion_time", 0) if timed else 0
        if deletion < creation:
            raise row.fail("deletion_time", f"must not be before creation_time ({creation})")
        return OpenbTask(row.text("name"), row.integer("cpu_milli", 0),
                         row.integer("memory_mib", 0), num_gpu, gpu_milli, spec, creation,
                         deletion)  # fmt: skip

    return _checked(rows, parse, path, what)
