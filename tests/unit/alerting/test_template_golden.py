"""Our renderer against Go's own text/template output (golden file made by gen_templates.go)."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from tensorfusion.domain.alerting.templates import (
    TemplateExecutionError,
    TemplateSyntaxError,
    compile_template,
)

_HERE = Path(__file__).parent / "golden"
_CASES = json.loads((_HERE / "template_cases.json").read_text(encoding="utf-8"))
_GOLDEN = json.loads((_HERE / "template_golden.json").read_text(encoding="utf-8"))


def _decode(pair: list[Any]) -> Any:
    kind, value = pair
    if kind == "float":
        if isinstance(value, str):
            return {"NaN": math.nan, "+Inf": math.inf, "-Inf": -math.inf}[value]
        return float(value)
    if kind == "int":
        return int(value)
    if kind == "list":
        return [_decode(item) for item in value]
    return value


@pytest.mark.parametrize("case", _CASES, ids=[c["name"] for c in _CASES])
def test_matches_go(case: dict[str, Any]) -> None:
    expected = _GOLDEN[case["name"]]
    data = {key: _decode(pair) for key, pair in case["data"].items()}
    if expected["error"]:
        with pytest.raises((TemplateSyntaxError, TemplateExecutionError)) as caught:
            compile_template(case["template"]).render(data)
        stage = expected["stage"]
        wanted = TemplateSyntaxError if stage == "parse" else TemplateExecutionError
        assert isinstance(caught.value, wanted), case["name"]
        return
    assert compile_template(case["template"]).render(data) == expected["output"]
