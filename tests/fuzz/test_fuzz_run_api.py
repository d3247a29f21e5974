"""Run objects with random spec mutations through localkube's API (CRD schema + CEL rules).

One in-memory localkube API server (``localkube.apiserver.running_apiserver``, the server
``krt dev up`` runs) with the chart's CRDs installed serves every example; requests are plain
REST calls as the admin (httpx).

Properties (seed 000 "Run status API" and spec immutability; seed 001 the Run model; the
CRD in ``charts/kruntimes/crds/runs.kruntimes.io.yaml``):

* a Run with broken fields (wrong types, strings over their limit, too many env entries,
  ``..`` or absolute paths, malformed handlers, both or neither mode, bad env names) is
  rejected 422 ``Invalid`` with a cause naming one of the broken fields, and nothing is
  stored; a Run with only valid changes is created (201) as sent;
* changing an immutable spec field of a stored Run is 422 naming that field, and the stored
  object is unchanged;
* any JSON at all as a spec, or any bytes as a body, is answered 201/400/415/422, never 5xx.
"""

from __future__ import annotations

import copy
import itertools
import json
import ssl
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import yaml
from hypothesis import event, example, given
from hypothesis import strategies as st
from krtapi_samples import SHA, function_run, task_run

from localkube.apiserver import ApiServerConfig, running_apiserver

from .fuzzing import fuzz_settings, on_trio, run_property

CRD_DIR = Path(__file__).resolve().parents[2] / "charts" / "kruntimes" / "crds"
RUNS = "/apis/kruntimes.io/v1alpha1/namespaces/default/runs"


@dataclass
class Api:
    client: httpx.AsyncClient
    names: itertools.count[int]

    def name(self) -> str:
        return f"fuzz-{next(self.names)}"


@pytest.fixture
async def api() -> AsyncIterator[Api]:
    async with running_apiserver(ApiServerConfig()) as handle:
        context = ssl.create_default_context(cadata=handle.ca_pem.decode())
        async with httpx.AsyncClient(
            base_url=handle.url,
            verify=context,
            headers={"Authorization": f"Bearer {handle.admin_token}"},
            timeout=15,
        ) as client:
            for path in sorted(CRD_DIR.glob("*.yaml")):
                created = await client.post(
                    "/apis/apiextensions.k8s.io/v1/customresourcedefinitions",
                    json=yaml.safe_load(path.read_text()),
                )
                assert created.status_code == 201, created.text
            with trio.fail_after(10):  # until the CRD is served (nothing to wait on but REST)
                while (await client.get(RUNS)).status_code != 200:  # noqa: ASYNC110
                    await trio.sleep(0.02)
            yield Api(client, itertools.count())


# --- mutations: each changes the spec and names the fields a rejection must point at --------

Spec = dict[str, Any]


@dataclass(frozen=True)
class Mutation:
    """One change to a Run's spec.

    Attributes:
        label: for statistics and failure output.
        apply: changes the spec in place.
        fields: the cause fields a rejection may name (empty: the change is valid).
    """

    label: str
    apply: Callable[[Spec], None]
    fields: tuple[str, ...] = ()


def _set(path: str, value: Any) -> Callable[[Spec], None]:
    keys = path.split(".")[1:]  # without the leading "spec"

    def apply(spec: Spec) -> None:
        node = spec
        for key in keys[:-1]:
            node = node.setdefault(key, {})
        node[keys[-1]] = value

    return apply


# (path, JSON type, kinds of Run it applies to)
TYPED_FIELDS = [
    ("spec.runtime", str),
    ("spec.env", list),
    ("spec.timeout", str),
    ("spec.mode", dict),
    ("spec.source", dict),
    ("spec.source.inline", str),
    ("spec.retryPolicy", dict),
    ("spec.retryPolicy.maxAttempts", int),
    ("spec.ttlSecondsAfterFinished", int),
    ("spec.cancelRequested", bool),
    ("spec.mode.function.handler", str),
    ("spec.mode.function.idleTimeoutSeconds", int),
    ("spec.resources.requests", dict),
]
_VALUES_BY_TYPE = {
    str: st.integers(-5, 5) | st.booleans() | st.just([]) | st.just({}),
    int: st.text(max_size=5) | st.booleans() | st.just([1]) | st.just({}) | st.just(1.5),
    bool: st.text(max_size=5) | st.integers(0, 1) | st.just([]) | st.just({}),
    list: st.text(max_size=5) | st.integers() | st.booleans() | st.just({}),
    dict: st.text(max_size=5) | st.integers() | st.booleans() | st.just([]),
}

IDENT = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z")
SAFE_TEXT = st.text(st.characters(exclude_categories=["Cs"]), max_size=40)


@st.composite
def invalid_mutations(draw: st.DrawFn, kind: str) -> Mutation:
    """One change that must be rejected (``kind``: "function" or "task" Run)."""
    family = draw(
        st.sampled_from(
            ["type", "long", "env-count", "dotdot", "handler", "modes", "env-name", "env-dup",
             "range", "duration"]
        )
    )  # fmt: skip
    if family == "type":
        fields = [(p, t) for p, t in TYPED_FIELDS if kind == "function" or ".function." not in p]
        path, json_type = draw(st.sampled_from(fields))
        value = draw(_VALUES_BY_TYPE[json_type])
        return Mutation(f"type {path}={value!r}", _set(path, value), (path,))
    if family == "long":
        options = [
            ("spec.runtime", 63, "a"),
            ("spec.source.inlinePath", 1024, "a"),
            ("spec.source.inline", 256 * 1024, "x"),
            ("spec.timeout", 64, "1"),
        ]
        if kind == "function":
            options.append(("spec.mode.function.handler", 256, "a"))
        path, limit, char = draw(st.sampled_from(options))
        value = char * (limit + draw(st.integers(1, 300)))
        if path == "spec.timeout":
            value += "s"
        if path == "spec.mode.function.handler":
            value = value[:-2] + ".f"
        return Mutation(f"long {path}", _set(path, value), (path,))
    if family == "env-count":
        count = draw(st.integers(129, 300))
        env = [{"name": f"V{i}", "value": ""} for i in range(count)]
        return Mutation(f"{count} env entries", _set("spec.env", env), ("spec.env",))
    if family == "dotdot":
        bad = draw(st.sampled_from(["..", "../x", "a/../b", "a/..", "/abs", "/"]))
        if kind == "task":
            path = draw(st.sampled_from(["spec.source.inlinePath", "spec.mode.task.entrypoint"]))
        else:
            path = "spec.source.inlinePath"
        return Mutation(f"path {path}={bad!r}", _set(path, bad), (path,))
    if family == "handler" and kind == "function":
        bad = draw(
            st.sampled_from(["nodot", "1a.b", "a..b", "a.b-c", "a.", ".a", "a.b c", "", "a/b.c"])
            | SAFE_TEXT.filter(lambda s: "." not in s)
        )
        path = "spec.mode.function.handler"
        return Mutation(f"handler {bad!r}", _set(path, bad), (path,))
    if family in ("modes", "handler"):
        mode = draw(
            st.sampled_from(
                [{}, {"task": {}, "function": {"handler": "main.invoke"}},
                 {"task": {"entrypoint": "main.py"}, "function": {"handler": "a.b"}}]
            )
        )  # fmt: skip
        return Mutation(f"mode {mode!r}", _set("spec.mode", mode), ("spec.mode",))
    if family == "env-name":
        bad = draw(
            st.sampled_from(["", "1A", "A-B", "A=B", "A B", "Ä"])
            | SAFE_TEXT.filter(lambda s: not s or not (s[0].isalpha() or s[0] == "_"))
        )
        env = [{"name": "GOOD", "value": "x"}, {"name": bad, "value": "y"}]
        return Mutation(
            f"env name {bad!r}", _set("spec.env", env), ("spec.env[1].name", "spec.env")
        )
    if family == "env-dup":
        name = draw(IDENT)
        env = [{"name": name, "value": "1"}, {"name": name, "value": "2"}]
        return Mutation(f"env dup {name}", _set("spec.env", env), ("spec.env", "spec.env[1]"))
    if family == "range":
        path, value = draw(
            st.sampled_from(
                [("spec.retryPolicy.maxAttempts", 0), ("spec.retryPolicy.maxAttempts", 101),
                 ("spec.ttlSecondsAfterFinished", -1), ("spec.ttlSecondsAfterFinished", 2**31)]
                + ([("spec.mode.function.idleTimeoutSeconds", 0)] if kind == "function" else [])
            )
        )  # fmt: skip
        return Mutation(f"range {path}={value}", _set(path, value), (path,))
    bad = draw(st.sampled_from(["0", "5", "1d", "-1s", "s", "1.5.2h", "0s", "PT5S"]))
    path = draw(st.sampled_from(["spec.timeout", "spec.retryPolicy.backoff"]))
    if path == "spec.retryPolicy.backoff" and bad in ("0", "0s"):
        bad = "1d"  # a zero backoff is valid
    return Mutation(f"duration {path}={bad!r}", _set(path, bad), (path,))


@st.composite
def valid_mutations(draw: st.DrawFn, kind: str) -> Mutation:
    """One change that keeps the Run valid."""
    family = draw(st.sampled_from(["env", "timeout", "retry", "ttl", "handler", "args", "inline"]))
    if family == "env":
        names = draw(st.lists(IDENT, max_size=128, unique=True))
        env = [{"name": n, "value": draw(SAFE_TEXT)} for n in names]
        return Mutation(f"{len(env)} env entries", _set("spec.env", env))
    if family == "timeout":
        value = draw(st.sampled_from(["1s", "90s", "10m", "1h30m", "1.5h", "250ms", "2h0m1s"]))
        return Mutation(f"timeout {value}", _set("spec.timeout", value))
    if family == "retry":
        policy = {"maxAttempts": draw(st.integers(1, 100)), "backoff": "0"}
        return Mutation(f"retry {policy}", _set("spec.retryPolicy", policy))
    if family == "ttl":
        value = draw(st.integers(0, 2**31 - 1))
        return Mutation(f"ttl {value}", _set("spec.ttlSecondsAfterFinished", value))
    if family == "handler" and kind == "function":
        value = ".".join(draw(st.lists(IDENT, min_size=2, max_size=4)))[:256]
        if "." not in value:  # pragma: no cover - two identifiers always give a dot
            value = "a.b"
        return Mutation(f"handler {value}", _set("spec.mode.function.handler", value))
    if family == "args" and kind == "task":
        args = draw(st.lists(SAFE_TEXT, max_size=20))
        return Mutation(f"{len(args)} args", _set("spec.mode.task.args", args))
    value = draw(st.text(st.characters(exclude_categories=["Cs"]), min_size=1, max_size=2000))
    return Mutation("inline", _set("spec.source.inline", value))


@dataclass(frozen=True)
class RunCase:
    kind: str
    valid: list[Mutation]
    invalid: list[Mutation]

    def body(self, name: str) -> dict[str, Any]:
        run = function_run() if self.kind == "function" else task_run()
        run["metadata"] = {"name": name, "namespace": "default"}
        for mutation in [*self.valid, *self.invalid]:
            mutation.apply(run["spec"])
        return run

    @property
    def fields(self) -> set[str]:
        return {f for m in self.invalid for f in m.fields}


@st.composite
def run_cases(draw: st.DrawFn, kind: str, invalid: bool) -> RunCase:
    valid = draw(st.lists(valid_mutations(kind), max_size=3))
    broken = draw(st.lists(invalid_mutations(kind), min_size=1, max_size=2)) if invalid else []
    return RunCase(kind, valid, broken)


def causes(body: dict[str, Any]) -> list[str]:
    return [str(c.get("field")) for c in body.get("details", {}).get("causes", [])]


def names_a_field(found: list[str], expected: set[str]) -> bool:
    """A cause is one of ``expected`` or inside one (``spec.env`` covers ``spec.env[3].name``)."""
    return any(
        f == e or f.startswith(e + ".") or f.startswith(e + "[") for f in found for e in expected
    )


async def check_run(api: Api, case: RunCase) -> str:
    name = api.name()
    body = case.body(name)
    created = await api.client.post(RUNS, json=body)
    if case.invalid:
        assert created.status_code == 422, (created.status_code, created.text[:2000])
        status = created.json()
        assert (status["kind"], status["reason"], status["code"]) == ("Status", "Invalid", 422)
        found = causes(status)
        assert names_a_field(found, case.fields), (found, case.fields, status["message"][:2000])
        stored = await api.client.get(f"{RUNS}/{name}")
        assert stored.status_code == 404, "a rejected Run was stored"
        return "rejected"
    assert created.status_code == 201, created.text[:2000]
    stored = (await api.client.get(f"{RUNS}/{name}")).json()
    for key, value in body["spec"].items():
        assert stored["spec"][key] == value, key
    deleted = await api.client.delete(f"{RUNS}/{name}")
    assert deleted.status_code == 200, deleted.text
    return "created"


@pytest.mark.parametrize(("kind", "invalid"), [("function", True), ("task", True),
                                               ("function", False), ("task", False)])  # fmt: skip
async def test_mutated_runs_are_rejected_naming_the_field_or_created(
    api: Api, kind: str, invalid: bool
) -> None:
    @fuzz_settings(max_examples=60 if invalid else 20)
    @given(case=run_cases(kind, invalid))
    def prop(case: RunCase) -> None:
        for mutation in case.invalid:
            event(mutation.label.split(" ")[0])
        on_trio(check_run, api, case)

    await run_property(prop)
    assert (await api.client.get(RUNS)).json()["items"] == []


# --- immutability ---------------------------------------------------------------------------

IMMUTABLE = [
    ("spec.runtime", "bash"),
    ("spec.source", {"repoURL": "https://example.com/x.git", "commitSHA": SHA}),
    ("spec.mode", {"task": {"entrypoint": "main.py"}}),
    ("spec.env", [{"name": "CHANGED", "value": "1"}]),
    ("spec.timeout", "2h"),
    ("spec.retryPolicy", {"maxAttempts": 7}),
    ("spec.resources", {"requests": {"runs": 2}}),
]


async def check_immutable(api: Api, changes: list[tuple[str, Any]]) -> None:
    name = api.name()
    run = function_run()
    run["metadata"] = {"name": name, "namespace": "default"}
    created = await api.client.post(RUNS, json=run)
    assert created.status_code == 201, created.text
    before = created.json()
    changed = copy.deepcopy(before)
    for path, value in changes:
        _set(path, value)(changed["spec"])
    replaced = await api.client.put(f"{RUNS}/{name}", json=changed)
    assert replaced.status_code == 422, replaced.text[:2000]
    status = replaced.json()
    assert status["reason"] == "Invalid"
    immutable = [path for path, _ in changes]
    # the transition rules live on spec: the cause is "spec", the message names the field
    assert any(f"{path} is immutable" in status["message"] for path in immutable), status
    after = (await api.client.get(f"{RUNS}/{name}")).json()
    assert after == before, "a rejected update changed the stored Run"
    assert (await api.client.delete(f"{RUNS}/{name}")).status_code == 200


async def test_immutable_spec_fields_cannot_change(api: Api) -> None:
    @fuzz_settings(max_examples=25)
    @given(
        changes=st.lists(
            st.sampled_from(IMMUTABLE), min_size=1, max_size=3, unique_by=lambda c: c[0]
        )
    )
    @example(changes=[("spec.runtime", "bash")])
    def prop(changes: list[tuple[str, Any]]) -> None:
        on_trio(check_immutable, api, changes)

    await run_property(prop)


# --- anything at all ------------------------------------------------------------------------

json_anything = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | SAFE_TEXT,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(SAFE_TEXT, inner, max_size=4),
    max_leaves=15,
)
spec_keys = st.sampled_from(
    ["runtime", "source", "mode", "env", "timeout", "retryPolicy", "ttlSecondsAfterFinished",
     "resources", "cancelRequested", "other"]
)  # fmt: skip


async def check_anything(api: Api, spec: Any, raw: bytes | None) -> str:
    name = api.name()
    if raw is None:
        run = {"apiVersion": "kruntimes.io/v1alpha1", "kind": "Run",
               "metadata": {"name": name, "namespace": "default"}, "spec": spec}  # fmt: skip
        response = await api.client.post(RUNS, json=run)
    else:
        response = await api.client.post(
            RUNS, content=raw, headers={"content-type": "application/json"}
        )
    assert response.status_code in (201, 400, 415, 422), (response.status_code, response.text)
    assert response.headers["content-type"].startswith("application/json")
    if response.status_code != 201:
        status = response.json()
        assert status["kind"] == "Status"
        assert status["code"] == response.status_code
        assert status["message"]
    if raw is None:
        stored = await api.client.get(f"{RUNS}/{name}")
        assert stored.status_code == (200 if response.status_code == 201 else 404)
        if response.status_code == 201:
            await api.client.delete(f"{RUNS}/{name}")
    else:
        for item in (await api.client.get(RUNS)).json()["items"]:
            await api.client.delete(f"{RUNS}/{item['metadata']['name']}")
    return str(response.status_code)


async def test_any_spec_or_body_gets_a_client_error_never_a_server_error(api: Api) -> None:
    @fuzz_settings(max_examples=80)
    @given(
        spec=json_anything | st.dictionaries(spec_keys, json_anything, max_size=6),
        raw=st.none()
        | st.binary(max_size=200)
        | json_anything.map(lambda v: json.dumps(v).encode())
        | st.just(
            b'{"apiVersion":"kruntimes.io/v1alpha1","kind":"Run","metadata":{"name":"x\\u0000"}}'
        ),
    )
    def prop(spec: Any, raw: bytes | None) -> None:
        event(on_trio(check_anything, api, spec, raw))

    await run_property(prop)


# --- merge patches of the mutable fields ----------------------------------------------------


@st.composite
def mutable_patches(draw: st.DrawFn) -> tuple[dict[str, Any], str | None]:
    """A merge patch of ``spec`` and the field a rejection must name (None: valid)."""
    field = draw(st.sampled_from(["ttlSecondsAfterFinished", "cancelRequested"]))
    if field == "ttlSecondsAfterFinished":
        valid = st.integers(0, 2**31 - 1)
        invalid = st.integers(max_value=-1) | st.integers(min_value=2**31) | _VALUES_BY_TYPE[int]
    else:
        valid = st.just(True)
        invalid = _VALUES_BY_TYPE[bool]
    if draw(st.booleans()):
        return {field: draw(valid)}, None
    return {field: draw(invalid)}, f"spec.{field}"


async def check_patch(api: Api, patch: dict[str, Any], field: str | None, cancelled: bool) -> str:
    name = api.name()
    run = task_run()
    run["metadata"] = {"name": name, "namespace": "default"}
    run["spec"]["cancelRequested"] = cancelled
    created = await api.client.post(RUNS, json=run)
    assert created.status_code == 201, created.text
    before = created.json()
    if cancelled and patch.get("cancelRequested") is not True and "cancelRequested" in patch:
        field = "spec.cancelRequested"
    patched = await api.client.patch(
        f"{RUNS}/{name}",
        json={"spec": patch},
        headers={"content-type": "application/merge-patch+json"},
    )
    after = (await api.client.get(f"{RUNS}/{name}")).json()
    assert (await api.client.delete(f"{RUNS}/{name}")).status_code == 200
    if field is None:
        assert patched.status_code == 200, patched.text[:2000]
        for key, value in patch.items():
            assert after["spec"][key] == value
        return "patched"
    assert patched.status_code == 422, patched.text[:2000]
    status = patched.json()
    assert status["reason"] == "Invalid"
    assert names_a_field(causes(status), {field}) or f"{field} may only" in status["message"], (
        status
    )
    assert after == before, "a rejected patch changed the stored Run"
    return "rejected"


async def test_patches_of_mutable_fields_are_validated(api: Api) -> None:
    @fuzz_settings(max_examples=40)
    @given(patch=mutable_patches(), cancelled=st.booleans())
    # a cancel request cannot be withdrawn (CEL transition rule)
    @example(patch=({"cancelRequested": False}, None), cancelled=True)
    def prop(patch: tuple[dict[str, Any], str | None], cancelled: bool) -> None:
        event(on_trio(check_patch, api, patch[0], patch[1], cancelled))

    await run_property(prop)
