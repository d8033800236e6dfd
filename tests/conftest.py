"""Hypothesis profiles: `HYPOTHESIS_PROFILE=ci` (set by .ci/run) runs five times the examples.

The profile is always loaded explicitly, so Hypothesis's own switch to its built-in `ci`
profile when a `CI` variable is set never applies.
"""

from __future__ import annotations

import os

from hypothesis import settings

_DEFAULT = settings.get_profile("default")

settings.register_profile("default", _DEFAULT)
settings.register_profile(
    "ci",
    _DEFAULT,
    max_examples=5 * _DEFAULT.max_examples,
    derandomize=False,
    deadline=None,
    print_blob=True,
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "default"))
