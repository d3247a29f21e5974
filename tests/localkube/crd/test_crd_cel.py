"""x-kubernetes-validations CEL rules (non-transition): functions, messages, rejection."""

from __future__ import annotations

from typing import Any

import pytest

from localkube.crd import CRDValidator, UnsupportedSchema
from localkube.errors import FieldError

HANDLER = r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*\.[A-Za-z_][A-Za-z0-9_]*$"


def rule_schema(value_schema: dict[str, Any], *rules: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {"v": {**value_schema, "x-kubernetes-validations": list(rules)}},
            }
        },
    }


def check(value_schema: dict[str, Any], rule: str, value: Any) -> list[FieldError]:
    validator = CRDValidator(rule_schema(value_schema, {"rule": rule}))
    return validator.admit({"spec": {"v": value}})[1]


def passes(value_schema: dict[str, Any], rule: str, value: Any) -> bool:
    errors = check(value_schema, rule, value)
    assert all(
        e.message.startswith("Invalid value") and "failed rule" in e.message for e in errors
    ), errors
    return not errors


STRING = {"type": "string"}
LIST = {"type": "array", "items": {"type": "string"}}
INTS = {"type": "array", "items": {"type": "integer"}}


@pytest.mark.parametrize(
    ("schema", "rule", "good", "bad"),
    [
        (STRING, "!self.contains('..')", "a/b", "a/../b"),
        (STRING, "!self.startsWith('/')", "rel/path", "/abs"),
        (STRING, "self.endsWith('.py')", "main.py", "main.sh"),
        (STRING, f"self.matches('{HANDLER.replace(chr(92), chr(92) * 2)}')", "pkg.mod.fn", "nodot"),
        (STRING, "size(self) <= 3", "héé", "abcd"),
        (STRING, "self.size() == 2", "é!", "abc"),
        (STRING, "self.lowerAscii() == 'abc'", "ABC", "abd"),
        (STRING, "self.upperAscii() == 'ÉA'", "Éa", "éa"),
        (STRING, "self.split(',').size() == 3", "a,b,c", "a,b"),
        (STRING, "self.split(',', 2) == ['a', 'b,c']", "a,b,c", "a,bc"),
        (STRING, "self.indexOf('b') == 1", "abc", "bbc"),
        (STRING, "self.indexOf('é', 2) == 2", "aéé", "éaa"),
        (STRING, "self.lastIndexOf('b') == 2", "abb", "bba"),
        (STRING, "self.replace('-', '_') == 'a_b_c'", "a-b-c", "a.b.c"),
        (STRING, "self.replace('-', '_', 1) == 'a_b-c'", "a-b-c", "a_b_c"),
        (STRING, "self.trim() == 'x'", "  x\t", " y "),
        (STRING, "self.substring(1, 3) == 'bc'", "abcd", "aXcd"),
        (STRING, "self.substring(2) == 'cd'", "abcd", "abce"),
        (STRING, "self.charAt(1) == 'é'", "aé", "ab"),
        (STRING, "self.reverse() == 'cba'", "abc", "abd"),
        (STRING, "self.find('[0-9]+') == '42'", "ab42cd", "ab7"),
        (STRING, "self.findAll('[0-9]').size() == 2", "a1b2", "a1"),
        (LIST, "self.join('-') == 'a-b'", ["a", "b"], ["a", "c"]),
        (LIST, "self.all(x, x.startsWith('k'))", ["ka", "kb"], ["ka", "b"]),
        (LIST, "self.exists(x, x == 'z')", ["a", "z"], ["a"]),
        (LIST, "self.exists_one(x, x == 'z')", ["z", "a"], ["z", "z"]),
        (LIST, "self.map(x, x + '!').exists(y, y == 'a!')", ["a"], ["b"]),
        (LIST, "self.filter(x, x != 'a').size() == 1", ["a", "b"], ["b", "c"]),
        (INTS, "self.isSorted()", [1, 2, 3], [2, 1]),
        (INTS, "self.sum() == 6", [1, 2, 3], [1, 2]),
        (INTS, "self.max() == 3 && self.min() == 1", [3, 1, 2], [4, 1]),
        (INTS, "self.indexOf(2) == 1", [1, 2], [2, 1]),
        ({"type": "integer"}, "self * 2 < 10", 4, 5),
        ({"type": "number"}, "self > 1.5", 2, 1),
        ({"type": "boolean"}, "self", True, False),
        ({"x-kubernetes-int-or-string": True}, "type(self) == int", 1, "1"),
        (
            {"type": "string", "format": "date-time"},
            "self < timestamp('2030-01-01T00:00:00Z')",
            "2024-01-01T00:00:00Z",
            "2031-01-01T00:00:00Z",
        ),
        ({"type": "string", "format": "duration"}, "self <= duration('1h')", "30m", "2h"),
        ({"type": "string", "format": "byte"}, "size(self) == 5", "aGVsbG8=", "aGk="),
        (
            {"type": "object", "additionalProperties": {"type": "string"}},
            "'a' in self",
            {"a": "1"},
            {"b": "1"},
        ),
        (
            {"type": "object", "additionalProperties": {"type": "integer"}},
            "self.all(k, self[k] > 0)",
            {"a": 1},
            {"a": 0},
        ),
    ],
)
def test_cel_functions(schema: dict[str, Any], rule: str, good: Any, bad: Any) -> None:
    assert passes(schema, rule, good)
    assert not passes(schema, rule, bad)


def test_default_failure_message_and_field() -> None:
    errors = check(STRING, "self != 'x'", "x")
    assert errors == [
        FieldError(
            "spec.v", "FieldValueInvalid", "Invalid value: \"string\": failed rule: self != 'x'"
        )
    ]


def make(rule: dict[str, Any], value_schema: dict[str, Any] | None = None) -> CRDValidator:
    return CRDValidator(rule_schema(value_schema or STRING, rule))


def test_message() -> None:
    errors = make({"rule": "!self.startsWith('/')", "message": "must be relative"}).admit(
        {"spec": {"v": "/x"}}
    )[1]
    assert [(e.field, e.message) for e in errors] == [
        ("spec.v", 'Invalid value: "string": must be relative')
    ]


def test_message_expression_wins_and_falls_back() -> None:
    rule = {
        "rule": "size(self) < 3",
        "message": "static",
        "messageExpression": "'too long: ' + self",
    }
    errors = make(rule).admit({"spec": {"v": "abcd"}})[1]
    assert errors[0].message == 'Invalid value: "string": too long: abcd'
    failing = {"rule": "size(self) < 3", "message": "static", "messageExpression": "self.missing"}
    with pytest.raises(UnsupportedSchema):  # selecting a field of a string does not compile
        make(failing)
    empty = {"rule": "size(self) < 3", "message": "static", "messageExpression": "''"}
    assert (
        make(empty).admit({"spec": {"v": "abcd"}})[1][0].message
        == 'Invalid value: "string": static'
    )
    erroring = {"rule": "size(self) < 3", "messageExpression": "'x' + string(1 / 0)"}
    assert make(erroring).admit({"spec": {"v": "abcd"}})[1][0].message == (
        'Invalid value: "string": failed rule: size(self) < 3'
    )


@pytest.mark.parametrize(
    ("reason", "message"),
    [
        ("FieldValueForbidden", "Forbidden: nope"),
        ("FieldValueRequired", "Required value: nope"),
        ("FieldValueDuplicate", 'Duplicate value: "string"'),
        ("FieldValueInvalid", 'Invalid value: "string": nope'),
    ],
)
def test_reason(reason: str, message: str) -> None:
    errors = make({"rule": "false", "message": "nope", "reason": reason}).admit(
        {"spec": {"v": "x"}}
    )[1]
    assert [(e.reason, e.message) for e in errors] == [(reason, message)]


def test_unknown_reason_rejected() -> None:
    with pytest.raises(UnsupportedSchema, match="reason"):
        make({"rule": "true", "reason": "FieldValueBogus"})


def test_field_path() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [
                    {"rule": "self.a.b != 'x'", "fieldPath": ".a.b", "message": "bad b"},
                    {"rule": "'k' in self.m", "fieldPath": ".m['some.key']", "message": "bad m"},
                ],
                "properties": {
                    "a": {"type": "object", "properties": {"b": {"type": "string"}}},
                    "m": {"type": "object", "additionalProperties": {"type": "string"}},
                },
            }
        },
    }
    errors = CRDValidator(schema).admit({"spec": {"a": {"b": "x"}, "m": {}}})[1]
    assert [e.field for e in errors] == ["spec.a.b", "spec.m[some.key]"]


def test_field_path_must_exist() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "x-kubernetes-validations": [{"rule": "true", "fieldPath": ".nope"}],
                "properties": {"a": {"type": "string"}},
            }
        },
    }
    with pytest.raises(UnsupportedSchema, match="does not refer to a valid field"):
        CRDValidator(schema)


def test_rule_at_root_reports_nil_field() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.metadata.name.startsWith('ok')", "message": "bad name"}
        ],
        "properties": {"spec": {"type": "object"}},
    }
    validator = CRDValidator(schema)
    assert validator.admit({"metadata": {"name": "ok-1"}})[1] == []
    errors = validator.admit({"metadata": {"name": "no"}})[1]
    assert [(e.field, e.message) for e in errors] == [
        ("<nil>", 'Invalid value: "object": bad name')
    ]


def test_exactly_one_mode_with_escaped_reserved_word() -> None:
    schema = {
        "type": "object",
        "properties": {
            "spec": {
                "type": "object",
                "properties": {
                    "mode": {
                        "type": "object",
                        "x-kubernetes-validations": [
                            {
                                "rule": "has(self.task) != has(self.__function__)",
                                "message": "exactly one of task or function must be set",
                            }
                        ],
                        "properties": {
                            "task": {
                                "type": "object",
                                "properties": {"entrypoint": {"type": "string"}},
                            },
                            "function": {
                                "type": "object",
                                "properties": {"handler": {"type": "string"}},
                            },
                        },
                    }
                },
            }
        },
    }
    validator = CRDValidator(schema)
    assert validator.admit({"spec": {"mode": {"task": {}}}})[1] == []
    assert validator.admit({"spec": {"mode": {"function": {"handler": "a.b"}}}})[1] == []
    for mode in ({}, {"task": {}, "function": {}}):
        errors = validator.admit({"spec": {"mode": mode}})[1]
        assert [(e.field, e.message) for e in errors] == [
            ("spec.mode", 'Invalid value: "object": exactly one of task or function must be set')
        ]


def test_reserved_word_property_unescaped_is_a_compile_error_like_kubernetes() -> None:
    schema = rule_schema(
        {
            "type": "object",
            "properties": {"function": {"type": "object"}, "task": {"type": "object"}},
        },
        {"rule": "has(self.task) != has(self.function)"},
    )
    with pytest.raises(UnsupportedSchema, match="undefined field 'function'.*__function__"):
        CRDValidator(schema)


def test_dashed_property_is_escaped() -> None:
    schema = rule_schema(
        {"type": "object", "properties": {"x-prop": {"type": "integer"}}},
        {"rule": "self.x__dash__prop > 0"},
    )
    validator = CRDValidator(schema)
    assert validator.admit({"spec": {"v": {"x-prop": 1}}})[1] == []
    assert len(validator.admit({"spec": {"v": {"x-prop": 0}}})[1]) == 1


def test_undefined_field_rejected() -> None:
    schema = rule_schema(
        {"type": "object", "properties": {"a": {"type": "string"}}}, {"rule": "self.b == 'x'"}
    )
    with pytest.raises(UnsupportedSchema, match="undefined field 'b'"):
        CRDValidator(schema)


def test_macro_variables_are_typed_from_items() -> None:
    items = {"type": "object", "properties": {"name": {"type": "string"}}}
    good = rule_schema({"type": "array", "items": items}, {"rule": "self.all(e, e.name != '')"})
    CRDValidator(good)
    bad = rule_schema({"type": "array", "items": items}, {"rule": "self.all(e, e.nmae != '')"})
    with pytest.raises(UnsupportedSchema, match="undefined field 'nmae'"):
        CRDValidator(bad)


@pytest.mark.parametrize(
    ("rule", "fragment"),
    [
        ("quantity(self).isGreaterThan(quantity('1'))", "quantity"),
        ("url(self).getHost() == ''", "url"),
        ("ip(self).family() == 4", "ip"),
        ("isCIDR(self)", "isCIDR"),
        ("sets.contains([1], [1])", "sets"),
        ("optional.of(self).hasValue()", "optional"),
        ("'%s'.format([self]) == ''", "format"),
        ("[1].map(x, x > 0, x)", "map' macro with 3 arguments"),
        ("[1].reduce(a, b, 0, a + b) == 1", "reduce"),
        ("self.frobnicate()", "frobnicate"),
        ("nosuchvar == 1", "undeclared reference to 'nosuchvar'"),
        ("self.hasValue()", "hasValue"),
        ("self ==", "compilation failed"),
        ("", "must not be empty"),
    ],
)
def test_unsupported_or_broken_rules_rejected_at_crd_create(rule: str, fragment: str) -> None:
    with pytest.raises(UnsupportedSchema) as info:
        make({"rule": rule})
    text = str(info.value)
    assert fragment in text
    assert "properties[v].x-kubernetes-validations[0]" in text


def test_evaluation_errors_are_field_errors() -> None:
    schema = rule_schema(
        {"type": "object", "additionalProperties": {"type": "integer"}}, {"rule": "self['k'] > 0"}
    )
    errors = CRDValidator(schema).admit({"spec": {"v": {"j": 1}}})[1]
    assert [(e.field, e.message) for e in errors] == [
        ("spec.v", "Invalid value: \"object\": no such key: k evaluating rule: self['k'] > 0")
    ]
    overflow = check({"type": "integer"}, "self + 1 > 0", 2**63 - 1)
    assert (
        overflow[0].message
        == 'Invalid value: "integer": integer overflow evaluating rule: self + 1 > 0'
    )
    divide = check({"type": "integer"}, "1 / self == 1", 0)
    assert (
        divide[0].message
        == 'Invalid value: "integer": division by zero evaluating rule: 1 / self == 1'
    )


def test_missing_optional_field_is_an_error_unless_guarded_by_has() -> None:
    value_schema = {"type": "object", "properties": {"a": {"type": "string"}}}
    assert check(value_schema, "has(self.a) && self.a == 'x'", {}) != []
    assert check(value_schema, "!has(self.a) || self.a == 'x'", {}) == []
    errors = check(value_schema, "self.a == 'x'", {})
    assert (
        errors[0].message
        == "Invalid value: \"object\": no such key: a evaluating rule: self.a == 'x'"
    )


def test_rules_skipped_after_blocking_schema_errors() -> None:
    validator = CRDValidator(
        rule_schema({"type": "string", "maxLength": 2}, {"rule": "self == 'ab'"})
    )
    errors = validator.admit({"spec": {"v": "abc"}})[1]
    assert [(e.field, e.reason) for e in errors] == [
        ("spec.v", "FieldValueTooLong"),
        ("<nil>", "FieldValueInvalid"),
    ]
    assert errors[1].message == (
        'Invalid value: "null": some validation rules were not checked because the object was'
        " invalid; correct the existing errors to complete validation"
    )


def test_rules_still_run_after_non_blocking_errors() -> None:
    validator = CRDValidator(
        rule_schema({"type": "string", "pattern": "^a"}, {"rule": "self == 'ab'"})
    )
    errors = validator.admit({"spec": {"v": "b"}})[1]
    assert [e.reason for e in errors] == ["FieldValueInvalid", "FieldValueInvalid"]
    assert "failed rule" in errors[1].message


def test_rule_not_evaluated_when_value_absent() -> None:
    validator = make({"rule": "false"})
    assert validator.admit({"spec": {}})[1] == []


def test_rules_on_list_items_use_index_paths() -> None:
    schema = rule_schema(
        {
            "type": "array",
            "items": {"type": "string", "x-kubernetes-validations": [{"rule": "self != 'bad'"}]},
        }
    )
    errors = CRDValidator(schema).admit({"spec": {"v": ["ok", "bad"]}})[1]
    assert [e.field for e in errors] == ["spec.v[1]"]


def test_rules_inside_junctors_rejected() -> None:
    schema = rule_schema(
        {"type": "string", "anyOf": [{"x-kubernetes-validations": [{"rule": "true"}]}]}
    )
    with pytest.raises(UnsupportedSchema, match="inside allOf, anyOf"):
        CRDValidator(schema)


def test_root_rules_see_api_version_kind_and_name_only() -> None:
    schema = {
        "type": "object",
        "x-kubernetes-validations": [
            {"rule": "self.kind == 'Run' && self.apiVersion.startsWith('kruntimes.io/')"},
            {
                "rule": "!has(self.metadata.generateName) || self.metadata.generateName.endsWith('-')"
            },
        ],
        "properties": {"spec": {"type": "object"}},
    }
    validator = CRDValidator(schema)
    good = {"apiVersion": "kruntimes.io/v1", "kind": "Run", "metadata": {"generateName": "r-"}}
    assert validator.admit(good)[1] == []
    assert len(validator.admit({**good, "kind": "Other"})[1]) == 1
    assert len(validator.admit({**good, "metadata": {"generateName": "r"}})[1]) == 1
    labels = {**schema, "x-kubernetes-validations": [{"rule": "has(self.metadata.labels)"}]}
    with pytest.raises(UnsupportedSchema, match="undefined field 'labels'"):
        CRDValidator(labels)


def test_escaped_dot_and_double_underscore_properties() -> None:
    value_schema = {
        "type": "object",
        "properties": {"a.b": {"type": "integer"}, "x__y": {"type": "integer"}},
    }
    validator = CRDValidator(
        rule_schema(value_schema, {"rule": "self.a__dot__b < self.x__underscores__y"})
    )
    assert validator.admit({"spec": {"v": {"a.b": 1, "x__y": 2}}})[1] == []
    assert len(validator.admit({"spec": {"v": {"a.b": 3, "x__y": 2}}})[1]) == 1


def test_runtime_overload_error_wording() -> None:
    errors = check({"x-kubernetes-int-or-string": True}, "self > 0", "text")
    assert len(errors) == 1
    assert errors[0].field == "spec.v"
    assert errors[0].message.startswith('Invalid value: "": \'no such overload')
    assert errors[0].message.endswith(
        "call arguments did not match a supported operator, function or macro signature for rule: self > 0"
    )


def test_message_expression_with_line_break_falls_back() -> None:
    rule = {"rule": "false", "message": "static", "messageExpression": "'two\\nlines'"}
    assert make(rule).admit({"spec": {"v": "x"}})[1][0].message == 'Invalid value: "string": static'


@pytest.mark.parametrize(
    ("rule", "value", "holds"),
    [
        ("self > 0", 0.5, True),  # number field (double) against an int literal
        ("self >= 1", 0.5, False),
        ("self == 2", 2.0, True),
        ("self != 2", 2.5, True),
        ("self < 1.5", 1, True),  # JSON 1 in a number field is still a double
    ],
)
def test_cross_type_numeric_comparisons_like_kubernetes(
    rule: str, value: float, holds: bool
) -> None:
    assert (check({"type": "number"}, rule, value) == []) is holds


@pytest.mark.parametrize(
    ("rule", "holds"),
    [
        ("1 == 1.0", True),
        ("1 == 'a'", False),
        ("'a' != 1", True),
        ("true == 1", False),
        ("null == 1", False),
        ("self == 'x'", True),
    ],
)
def test_heterogeneous_equality(rule: str, holds: bool) -> None:
    assert (check(STRING, rule, "x") == []) is holds
