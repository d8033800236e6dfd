"""The config watcher reports a `config.yaml` it cannot read, whatever the parser raised, and
loads the fixed file afterwards (issue 22, finding 3)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
import yaml

from tensorfusion.alerting import config_watcher
from tensorfusion.alerting.config_watcher import ConfigWatcher
from tensorfusion.alerting.event_sink import RecordingEventSink
from tensorfusion.alerting.self_metrics import EvaluatorMetrics
from tensorfusion.domain.alerting.dynamic_config import DynamicConfig, parse_dynamic_config
from tensorfusion.domain.alerting.templates import MAX_NESTING_DEPTH


def _rule(name: str, **fields: Any) -> dict[str, Any]:
    return {"name": name, "query": "SELECT 1 AS one", "evaluationInterval": "10s",
            "severity": "P1", **fields}  # fmt: skip


def _write(directory: Path, text: str) -> None:
    temporary = directory / ".config.yaml.tmp"
    temporary.write_text(text, encoding="utf-8")
    os.replace(temporary, directory / "config.yaml")


class Loaded:
    """The configurations handed to `on_change`."""

    def __init__(self) -> None:
        self.configs: list[DynamicConfig] = []

    async def __call__(self, config: DynamicConfig) -> None:
        self.configs.append(config)


def _watcher(directory: Path) -> tuple[ConfigWatcher, RecordingEventSink, Loaded]:
    events = RecordingEventSink()
    loaded = Loaded()
    watcher = ConfigWatcher(directory, loaded, events=events, metrics=EvaluatorMetrics())
    return watcher, events, loaded


def _invalid(events: RecordingEventSink) -> list[str]:
    return [event.message for event in events.events if event.reason == "DynamicConfigInvalid"]


def _valid_gauge(watcher: ConfigWatcher) -> float | None:
    registry = watcher._metrics.registry
    return registry.get_sample_value("tf_dynamic_config_valid")


async def test_deeply_nested_yaml_is_reported_once_then_a_fixed_file_loads(tmp_path: Path) -> None:
    _write(tmp_path, yaml.safe_dump({"alertRules": [_rule("Before")]}))
    watcher, events, loaded = _watcher(tmp_path)
    assert await watcher.check()
    _write(tmp_path, "alertRules: " + "[" * 5000 + "]" * 5000 + "\n")

    assert not await watcher.check()
    (message,) = _invalid(events)
    assert "config.yaml" in message and "deeper than 100 levels" in message
    assert watcher.status()["error"] == message
    assert _valid_gauge(watcher) == 0
    assert [rule.name for rule in watcher.config.rules.rules] == ["Before"]  # previous kept
    assert not await watcher.check()  # the same broken file is not reported again
    assert len(_invalid(events)) == 1

    _write(tmp_path, yaml.safe_dump({"alertRules": [_rule("After")]}))
    assert await watcher.check()
    assert [rule.name for rule in loaded.configs[-1].rules.rules] == ["After"]
    assert watcher.status()["error"] == "" and _valid_gauge(watcher) == 1


@pytest.mark.parametrize("failure", [RecursionError(), MemoryError(), RuntimeError("boom")])
async def test_any_parser_failure_is_reported_and_a_fixed_file_loads_after(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, failure: BaseException
) -> None:

    def broken(text: str, source: str, previous: DynamicConfig | None = None) -> DynamicConfig:
        if "Broken" in text:
            raise failure
        return parse_dynamic_config(text, source, previous)

    monkeypatch.setattr(f"{config_watcher.__name__}.parse_dynamic_config", broken)
    watcher, events, loaded = _watcher(tmp_path)
    _write(tmp_path, yaml.safe_dump({"alertRules": [_rule("Broken")]}))

    assert not await watcher.check()
    (message,) = _invalid(events)
    assert type(failure).__name__ in message and "config.yaml" in message
    assert watcher.status()["error"] == message
    assert not loaded.configs

    _write(tmp_path, yaml.safe_dump({"alertRules": [_rule("Fixed")]}))
    assert await watcher.check()
    assert [rule.name for rule in loaded.configs[-1].rules.rules] == ["Fixed"]
    assert watcher.status()["error"] == ""


async def test_a_deeply_nested_template_rejects_its_rule_alone(tmp_path: Path) -> None:
    deep = "{{ if 1 }}" * 3000 + "x" + "{{ end }}" * 3000
    _write(tmp_path, yaml.safe_dump({"alertRules": [_rule("Deep", summary=deep), _rule("Ok")]}))
    watcher, events, loaded = _watcher(tmp_path)

    assert await watcher.check()
    assert [rule.name for rule in loaded.configs[-1].rules.rules] == ["Ok"]
    (rejected,) = [e.message for e in events.events if e.reason == "AlertRuleInvalid"]
    assert "(Deep)" in rejected and f"deeper than {MAX_NESTING_DEPTH} levels" in rejected
