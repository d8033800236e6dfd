"""How many Hypothesis examples a test with its own budget runs under the active profile."""

from __future__ import annotations

import hypothesis


def examples(count: int) -> int:
    """`count` Hypothesis examples scaled by the active profile (five times under `ci`)."""
    active, default = hypothesis.settings(), hypothesis.settings.get_profile("default")
    return count * active.max_examples // default.max_examples
