"""The pool-wide ranked maxima answer as a scan of every node's current amounts would."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from tensorfusion.domain.scheduling.free_ranks import RankedMax

_NAMES = st.sampled_from(["a", "b", "c", "d"])
_FREE = st.lists(st.integers(-5, 50), min_size=1, max_size=4).map(
    lambda values: tuple(sorted(values, reverse=True))
)
_OPS = st.lists(st.tuples(_NAMES, st.none() | _FREE), max_size=60)


@given(_OPS, st.integers(0, 5), st.integers(-5, 55))
def test_any_holding_matches_a_scan(ops: list[tuple[str, tuple[int, ...] | None]],
                                    count: int, amount: int) -> None:  # fmt: skip
    ranked = RankedMax()
    current: dict[str, tuple[int, ...]] = {}
    for name, free in ops:
        ranked.place(name, free)
        if free is None:
            current.pop(name, None)
        else:
            current[name] = free
        expected = count >= 1 and any(
            len(f) >= count and (amount <= 0 or f[count - 1] >= amount) for f in current.values()
        )
        assert ranked.any_holding(count, amount) == expected
