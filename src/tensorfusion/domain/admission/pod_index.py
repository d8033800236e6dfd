"""The cyclic pod-index counter behind `assign-index` (admission.md §11, api.md §6).

The leader hands each TF pod an index p in 1..128, cycling; the index resource on the pod
encodes it. A dry run previews the next value without taking it.
"""

from __future__ import annotations

from tensorfusion.domain.annotations import INDEX_MAX, INDEX_MIN

__all__ = ["PodIndexCounter"]


class PodIndexCounter:
    """Hands out INDEX_MIN..INDEX_MAX (1..128) in order, then starts again at 1."""

    __slots__ = ("_next",)

    def __init__(self, after: int | None = None) -> None:
        """A counter whose first value is 1, or the value following `after` (see `restore`)."""
        self._next = INDEX_MIN
        if after is not None:
            self.restore(after)

    def peek(self) -> int:
        """The value `take` would return next; does not advance (dry runs)."""
        return self._next

    def take(self) -> int:
        """The next value; advances the counter (128 is followed by 1)."""
        value = self._next
        self._next = value % INDEX_MAX + INDEX_MIN
        return value

    def restore(self, last: int) -> None:
        """Continue after `last`, the value most recently handed out (e.g. by a former leader)."""
        if (
            isinstance(last, bool)
            or not isinstance(last, int)
            or not INDEX_MIN <= last <= INDEX_MAX
        ):
            raise ValueError(
                f"pod index counter: invalid value {last!r}: must be an integer between "
                f"{INDEX_MIN} and {INDEX_MAX} (the last index handed out)"
            )
        self._next = last % INDEX_MAX + INDEX_MIN

    def __repr__(self) -> str:
        return f"PodIndexCounter(next={self._next})"
