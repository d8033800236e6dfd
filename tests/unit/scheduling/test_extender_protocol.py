"""The kube-scheduler extender messages: reading requests, writing answers (scheduling.md §15)."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from tensorfusion.domain.scheduling.extender_protocol import (
    ExtenderArgs,
    ExtenderBindingArgs,
    ExtenderBindingResult,
    ExtenderFilterResult,
    ExtenderProtocolError,
    HostPriority,
    HostPriorityList,
    host_priorities,
)

POD: dict[str, Any] = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "p1", "namespace": "ml", "uid": "uid-p1"},
    "spec": {"containers": [{"name": "main", "image": "busybox"}]},
}


def node(name: object) -> dict[str, Any]:
    return {"metadata": {"name": name}, "status": {}}


def binding(**fields: object) -> dict[str, object]:
    body: dict[str, object] = {
        "PodName": "p1",
        "PodNamespace": "ml",
        "PodUID": "uid-p1",
        "Node": "node-a",
    }
    body.update(fields)
    return body


# ---- ExtenderArgs ----------------------------------------------------------------------------


def test_filter_args_with_node_names_round_trip() -> None:
    body = orjson.loads(orjson.dumps({"Pod": POD, "Nodes": None, "NodeNames": ["node-a", "b"]}))
    args = ExtenderArgs.from_json(body)
    assert args == ExtenderArgs(POD, ("node-a", "b"), True, None)
    assert (args.pod_name, args.pod_namespace, args.pod_uid) == ("p1", "ml", "uid-p1")
    assert args.to_json() == body
    assert ExtenderArgs.from_json(args.to_json()) == args


def test_filter_args_with_a_node_list_take_the_item_names() -> None:
    body = {"Pod": POD, "Nodes": {"metadata": {}, "items": [node("node-a"), node("node-b")]}}
    args = ExtenderArgs.from_json(body)
    assert args.node_names == ("node-a", "node-b")
    assert not args.node_cache_capable
    assert args.nodes == (node("node-a"), node("node-b"))
    assert args.to_json()["NodeNames"] is None
    assert ExtenderArgs.from_json(args.to_json()) == args
    # Go writes a nil item slice as null: no candidate nodes.
    assert ExtenderArgs.from_json({"Pod": POD, "Nodes": {"items": None}}).node_names == ()


def test_filter_args_prefer_node_names_over_a_node_list() -> None:
    body = {"Pod": POD, "Nodes": {"items": [node("x")]}, "NodeNames": ["node-a"]}
    args = ExtenderArgs.from_json(body)
    assert (args.node_names, args.node_cache_capable) == (("node-a",), True)
    assert args.nodes == (node("x"),)
    assert ExtenderArgs.from_json(args.to_json()) == args


def test_pod_identity_reads_empty_when_metadata_lacks_it() -> None:
    args = ExtenderArgs.from_json({"Pod": {"metadata": {}}, "NodeNames": []})
    assert (args.pod_name, args.pod_namespace, args.pod_uid, args.node_names) == ("", "", "", ())


@pytest.mark.parametrize("key", ["NodeNames", "nodenames", "NODENAMES", "nODEnAMES", "NodeNameſ"])
def test_request_keys_match_case_insensitively_as_go_does(key: str) -> None:
    # Go folds the long s (U+017F) onto "S" as well.
    args = ExtenderArgs.from_json({"pod": POD, key: ["node-a"]})
    assert args.node_names == ("node-a",)
    assert ExtenderArgs.from_json({"POD": POD, "nodes": {"items": [node("n")]}}).node_names == (
        "n",
    )
    lower = {k.lower(): v for k, v in binding().items()}
    assert ExtenderBindingArgs.from_json(lower) == ExtenderBindingArgs.from_json(binding())


def test_other_non_ascii_look_alikes_do_not_match() -> None:
    # Go's folding does not map the dotless i (U+0131) onto "I".
    with pytest.raises(ExtenderProtocolError, match=r"^ExtenderBindingArgs\.PodUID "):
        ExtenderBindingArgs.from_json(
            {
                **{k: v for k, v in binding().items() if k != "PodUID"},
                "PodUıD": "uid-p1",
            }
        )


@pytest.mark.parametrize(
    "body",
    [
        {"NodeNames": ["first"], "nodenames": ["last"]},
        {"nodenames": ["first"], "NodeNames": ["last"]},
        {"NODENAMES": ["first"], "NodeNames": ["middle"], "nodeNames": ["last"]},
    ],
)
def test_as_in_go_the_last_matching_key_wins_whatever_its_case(body: dict[str, Any]) -> None:
    assert ExtenderArgs.from_json({"Pod": POD, **body}).node_names == ("last",)


def test_unknown_keys_are_ignored() -> None:
    body = {"Pod": POD, "NodeNames": ["a"], "Extra": 1, "nodeNamesX": 5}
    assert ExtenderArgs.from_json(body).node_names == ("a",)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (None, "ExtenderArgs must be a JSON object, got null"),
        ([POD], 'ExtenderArgs must be a JSON object, got [{"apiVersion":"v1"'),
        ({"NodeNames": []}, "ExtenderArgs.Pod must be a v1 Pod object, is missing"),
        ({"Pod": None, "NodeNames": []}, "ExtenderArgs.Pod must be a v1 Pod object, got null"),
        ({"Pod": "p1", "NodeNames": []}, 'ExtenderArgs.Pod must be a v1 Pod object, got "p1"'),
        (
            {"Pod": {"spec": {}}, "NodeNames": []},
            "ExtenderArgs.Pod.metadata must be a JSON object, is missing",
        ),
        (
            {"Pod": {"metadata": []}, "NodeNames": []},
            "ExtenderArgs.Pod.metadata must be a JSON object, got []",
        ),
        (
            {"Pod": {"metadata": {"uid": 7}}, "NodeNames": []},
            "ExtenderArgs.Pod.metadata.uid must be a string, got 7",
        ),
        (
            {"Pod": POD, "NodeNames": "node-a"},
            'ExtenderArgs.NodeNames must be a list of node names (strings), got "node-a"',
        ),
        (
            {"Pod": POD, "NodeNames": {"node-a": True}},
            'ExtenderArgs.NodeNames must be a list of node names (strings), got {"node-a":true}',
        ),
        (
            {"Pod": POD, "NodeNames": ["a", 5]},
            "ExtenderArgs.NodeNames[1] must be a non-empty string, got 5",
        ),
        (
            {"Pod": POD, "NodeNames": ["a", ""]},
            'ExtenderArgs.NodeNames[1] must be a non-empty string, got ""',
        ),
        (
            {"Pod": POD, "NodeNames": None, "Nodes": None},
            "ExtenderArgs.NodeNames must be a list of node names, got null: "
            "Nodes is null too; nodeCacheCapable: true requires NodeNames",
        ),
        (
            {"Pod": POD},
            "ExtenderArgs.NodeNames must be a list of node names, is missing: "
            "Nodes is null too; nodeCacheCapable: true requires NodeNames",
        ),
        (
            {"Pod": POD, "Nodes": ["node-a"]},
            'ExtenderArgs.Nodes must be a v1 NodeList object or null, got ["node-a"]',
        ),
        (
            {"Pod": POD, "Nodes": {"items": {}}},
            "ExtenderArgs.Nodes.items must be a list of v1 Node objects, got {}",
        ),
        (
            {"Pod": POD, "Nodes": {"items": [node("a"), "b"]}},
            'ExtenderArgs.Nodes.items[1] must be a v1 Node object, got "b"',
        ),
        (
            {"Pod": POD, "Nodes": {"items": [{"status": {}}]}},
            "ExtenderArgs.Nodes.items[0].metadata must be a JSON object, is missing",
        ),
        (
            {"Pod": POD, "Nodes": {"items": [{"metadata": {}}]}},
            "ExtenderArgs.Nodes.items[0].metadata.name must be a non-empty string, is missing",
        ),
        (
            {"Pod": POD, "Nodes": {"items": [node(None)]}},
            "ExtenderArgs.Nodes.items[0].metadata.name must be a non-empty string, got null",
        ),
    ],
)
def test_filter_args_errors_name_the_field_the_value_and_what_is_allowed(
    body: object, message: str
) -> None:
    with pytest.raises(ExtenderProtocolError) as caught:
        ExtenderArgs.from_json(body)
    assert str(caught.value).startswith(message)
    assert caught.value.where == message.split(" must ", 1)[0]


def test_long_bad_values_are_shortened() -> None:
    with pytest.raises(ExtenderProtocolError) as caught:
        ExtenderArgs.from_json({"Pod": POD, "NodeNames": "n" * 500})
    text = str(caught.value)
    assert text.startswith(
        'ExtenderArgs.NodeNames must be a list of node names (strings), got "nnn'
    )
    assert text.endswith("...") and len(text) < 200


def test_args_need_a_node_list_when_not_node_cache_capable() -> None:
    with pytest.raises(ValueError, match="nodes are needed"):
        ExtenderArgs(POD, ("a",), node_cache_capable=False)


# ---- ExtenderBindingArgs ---------------------------------------------------------------------


def test_binding_args_round_trip() -> None:
    args = ExtenderBindingArgs.from_json(binding())
    assert args == ExtenderBindingArgs("p1", "ml", "uid-p1", "node-a")
    assert args.to_json() == binding()
    assert ExtenderBindingArgs.from_json(args.to_json()) == args
    mixed = {"podname": "p1", "PODNAMESPACE": "ml", "PodUid": "uid-p1", "node": "node-a"}
    assert ExtenderBindingArgs.from_json(mixed) == args
    both = {**binding(), "node": "later"}
    assert ExtenderBindingArgs.from_json(both).node == "later"


@pytest.mark.parametrize("key", ["PodName", "PodNamespace", "PodUID", "Node"])
@pytest.mark.parametrize(
    ("value", "got"), [(None, "got null"), (5, "got 5"), ("", 'got ""'), (..., "is missing")]
)
def test_binding_args_errors(key: str, value: object, got: str) -> None:
    body = binding()
    if value is ...:
        del body[key]
    else:
        body[key] = value
    with pytest.raises(ExtenderProtocolError) as caught:
        ExtenderBindingArgs.from_json(body)
    assert str(caught.value) == f"ExtenderBindingArgs.{key} must be a non-empty string, {got}"


def test_binding_args_body_must_be_an_object() -> None:
    with pytest.raises(ExtenderProtocolError, match=r"^ExtenderBindingArgs must be a JSON object"):
        ExtenderBindingArgs.from_json("bind")


# ---- ExtenderFilterResult --------------------------------------------------------------------


def test_filter_result_json_is_exactly_what_kube_scheduler_reads() -> None:
    result = ExtenderFilterResult.none_pass({"node-b": "not selected: lower score"})
    assert orjson.dumps(result.to_json()) == (
        b'{"NodeNames":[],"FailedNodes":{},'
        b'"FailedAndUnresolvableNodes":{"node-b":"not selected: lower score"},"Error":""}'
    )
    assert orjson.dumps(ExtenderFilterResult.only("node-a").to_json()) == (
        b'{"NodeNames":["node-a"],"FailedNodes":{},"FailedAndUnresolvableNodes":{},"Error":""}'
    )
    assert orjson.dumps(ExtenderFilterResult.error("allocator not ready").to_json()) == (
        b'{"NodeNames":[],"FailedNodes":{},"FailedAndUnresolvableNodes":{},'
        b'"Error":"allocator not ready"}'
    )


def test_filter_result_constructors() -> None:
    assert ExtenderFilterResult.all_pass(["a", "b"]).to_json() == {
        "NodeNames": ["a", "b"],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {},
        "Error": "",
    }
    assert ExtenderFilterResult.none_pass({"a": "Insufficient VRAM"}).to_json() == {
        "NodeNames": [],
        "FailedNodes": {},
        "FailedAndUnresolvableNodes": {"a": "Insufficient VRAM"},
        "Error": "",
    }
    with pytest.raises(ValueError, match=r"nodes \['a'\] both pass and fail"):
        ExtenderFilterResult(("a",), {}, {"a": "why", "b": "why"})
    with pytest.raises(ValueError, match="must not be empty"):
        ExtenderFilterResult.error("")


def test_filter_result_round_trip_and_go_nil_maps() -> None:
    result = ExtenderFilterResult(("a",), {"b": "later"}, {"c": "never"}, "")
    assert ExtenderFilterResult.from_json(result.to_json()) == result
    nil = {
        "Nodes": None,
        "NodeNames": None,
        "FailedNodes": None,
        "FailedAndUnresolvableNodes": None,
    }
    assert ExtenderFilterResult.from_json(nil) == ExtenderFilterResult()
    folded = {"nodenames": ["a"], "error": "boom", "failedandunresolvablenodes": {"b": "x"}}
    assert ExtenderFilterResult.from_json(folded) == ExtenderFilterResult(
        ("a",), {}, {"b": "x"}, "boom"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (
            {"FailedNodes": {"a": 1}},
            "ExtenderFilterResult.FailedNodes['a'] must be a string, got 1",
        ),
        (
            {"FailedAndUnresolvableNodes": ["a"]},
            "ExtenderFilterResult.FailedAndUnresolvableNodes must be an object of node name to "
            'reason, got ["a"]',
        ),
        ({"Error": False}, "ExtenderFilterResult.Error must be a string, got false"),
        ({"NodeNames": "a"}, "ExtenderFilterResult.NodeNames must be a list of node names"),
    ],
)
def test_filter_result_reading_errors(body: dict[str, object], message: str) -> None:
    with pytest.raises(ExtenderProtocolError) as caught:
        ExtenderFilterResult.from_json(body)
    assert str(caught.value).startswith(message)


# ---- HostPriorityList ------------------------------------------------------------------------


def test_host_priorities_serialise_in_order() -> None:
    priorities = host_priorities({"node-a": 10, "node-b": 0, "node-c": 3})
    assert orjson.dumps(priorities.to_json()) == (
        b'[{"Host":"node-a","Score":10},{"Host":"node-b","Score":0},{"Host":"node-c","Score":3}]'
    )
    assert HostPriorityList.from_json(priorities.to_json()) == priorities
    assert HostPriorityList.from_json([{"host": "x", "SCORE": 4}]) == host_priorities({"x": 4})


@pytest.mark.parametrize("score", [11, -1, True, 5.0, "5"])
def test_scores_outside_zero_to_ten_are_refused(score: object) -> None:
    with pytest.raises(ValueError) as caught:
        host_priorities({"node-a": 1, "node-b": score})  # type: ignore[dict-item]
    assert str(caught.value) == (
        f"HostPriority for node 'node-b': score {score!r} is out of range; "
        "must be an integer from 0 to 10"
    )
    with pytest.raises(ExtenderProtocolError) as read:
        HostPriorityList.from_json([{"Host": "node-b", "Score": score}])
    assert str(read.value).startswith("HostPriorityList[0].Score must be an integer from 0 to 10")


def test_host_priority_reading_errors() -> None:
    with pytest.raises(ExtenderProtocolError, match=r"^HostPriorityList must be a list"):
        HostPriorityList.from_json({"Host": "a", "Score": 1})
    with pytest.raises(ExtenderProtocolError, match=r"^HostPriorityList\[1\] must be an object"):
        HostPriorityList.from_json([{"Host": "a", "Score": 1}, 7])
    with pytest.raises(ExtenderProtocolError, match=r"^HostPriorityList\[0\]\.Host must be a"):
        HostPriorityList.from_json([{"Score": 1}])
    assert HostPriority("a", 0).to_json() == {"Host": "a", "Score": 0}


# ---- ExtenderBindingResult -------------------------------------------------------------------


def test_binding_result() -> None:
    assert ExtenderBindingResult().to_json() == {"Error": ""}
    assert ExtenderBindingResult().ok
    failed = ExtenderBindingResult.error("not leader")
    assert (failed.to_json(), failed.ok) == ({"Error": "not leader"}, False)
    assert ExtenderBindingResult.from_json(failed.to_json()) == failed
    assert ExtenderBindingResult.from_json({}).ok
    assert ExtenderBindingResult.from_json({"error": None}).ok
    assert ExtenderBindingResult.from_json({"ERROR": "x"}) == ExtenderBindingResult("x")
    with pytest.raises(ExtenderProtocolError, match=r"^ExtenderBindingResult\.Error must be a"):
        ExtenderBindingResult.from_json({"Error": 1})
    with pytest.raises(ValueError, match="must not be empty"):
        ExtenderBindingResult.error("")
