"""The placement-mode registry: every mode of the CRD enum has one plugin."""

from __future__ import annotations

import pytest

from tensorfusion.domain.scheduling.placement_modes import PlacementModePlugin, plugin_of, register
from tensorfusion.domain.vocabulary import PlacementMode


@pytest.mark.parametrize("mode", list(PlacementMode))
def test_every_mode_of_the_enum_is_registered_under_its_name(mode: PlacementMode) -> None:
    assert plugin_of(mode).mode is mode


def test_only_low_load_first_ranks_nodes_emptiest_first() -> None:
    emptiest_first = {m for m in PlacementMode if plugin_of(m).node_by_available}
    assert emptiest_first == {PlacementMode.LOW_LOAD_FIRST}


def test_a_second_plugin_for_a_registered_name_is_refused() -> None:
    other = PlacementModePlugin(
        PlacementMode.COMPACT_FIRST, node_by_available=True, gpu_by_available=True
    )
    with pytest.raises(ValueError, match="registered twice"):
        register(other)
    assert plugin_of(PlacementMode.COMPACT_FIRST) != other
