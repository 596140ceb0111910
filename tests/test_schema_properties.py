"""Property tests for the JSON Schema engine: generated schemas of the supported subset with
instances generated to be valid for them, and arbitrary JSON values that must never crash it."""

from __future__ import annotations

from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from oam_actors import Schema
from oam_actors.agent.schema._check import check_schema
from oam_actors.agent.schema._render import render_compact, render_lines

SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

NAMES = st.sampled_from(["item", "quantity", "reasoning", "choice", "tags", "note", "x", "odd key"])
WORDS = st.text(alphabet="abcdefgh ", min_size=1, max_size=6)

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=12),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=12,
)


@st.composite
def leaf_schemas(draw: st.DrawFn) -> dict[str, Any]:
    kind = draw(
        st.sampled_from(["string", "enum", "pattern", "integer", "number", "boolean", "null", "const"])
    )
    if kind == "string":
        low = draw(st.integers(0, 3))
        return {"type": "string", "minLength": low, "maxLength": low + draw(st.integers(0, 4))}
    if kind == "enum":
        return {"type": "string", "enum": draw(st.lists(WORDS, min_size=1, max_size=4, unique=True))}
    if kind == "pattern":
        return {"type": "string", "pattern": draw(st.sampled_from(["^[a-z]+$", "[0-9]", "^ab", "x{2}"]))}
    if kind == "integer":
        low = draw(st.integers(-50, 50))
        return {"type": "integer", "minimum": low, "maximum": low + draw(st.integers(0, 20))}
    if kind == "number":
        return {"type": "number", "exclusiveMinimum": -1.5, "maximum": draw(st.floats(0, 100))}
    if kind == "const":
        return {"const": draw(st.one_of(WORDS, st.integers(-3, 3), st.booleans()))}
    return {"type": kind, **({"nullable": True} if draw(st.booleans()) else {})}


def extend(children: st.SearchStrategy[dict[str, Any]]) -> st.SearchStrategy[dict[str, Any]]:
    objects = st.builds(
        lambda props, data: {
            "type": "object",
            "properties": props,
            "required": sorted(data.draw(st.sets(st.sampled_from(sorted(props)))) if props else []),
            **data.draw(
                st.sampled_from(
                    [{}, {"additionalProperties": True}, {"additionalProperties": {"type": "integer"}}]
                )
            ),
        },
        st.dictionaries(NAMES, children, max_size=4),
        st.data(),
    )
    arrays = st.builds(
        lambda items, low: {"type": "array", "items": items, "minItems": low, "maxItems": low + 3},
        children,
        st.integers(0, 2),
    )
    any_of = st.lists(children, min_size=1, max_size=3).map(lambda choices: {"anyOf": choices})
    # Branches of different kinds, so a valid value matches exactly one of them.
    one_of = st.sampled_from(
        [
            {"oneOf": [{"type": "string"}, {"type": "integer"}]},
            {
                "oneOf": [
                    {"type": "boolean"},
                    {"type": "array", "items": {"type": "string"}},
                    {"type": "null"},
                ]
            },
        ]
    )
    all_of = children.map(lambda child: {"allOf": [child, {"description": "also"}]})
    return objects | arrays | any_of | one_of | all_of


def with_refs(schema: dict[str, Any]) -> st.SearchStrategy[dict[str, Any]]:
    """The schema itself, or the same reached through a ``$ref`` at the root or in a property."""
    defs = {"$defs": {"Inner": schema}}
    return st.sampled_from(
        [
            schema,
            {**defs, "$ref": "#/$defs/Inner"},
            {**defs, "type": "object", "properties": {"r": {"$ref": "#/$defs/Inner"}}, "required": ["r"]},
        ]
    )


schemas = st.recursive(leaf_schemas(), extend, max_leaves=6).flatmap(with_refs)


@st.composite
def instance(draw: st.DrawFn, schema: Any, root: Any) -> Any:
    """A value valid for ``schema`` (a node of the closed document ``root``)."""
    if "$ref" in schema:
        return draw(instance(root["$defs"]["Inner"], root))
    if "allOf" in schema:
        return draw(instance(schema["allOf"][0], root))
    if "anyOf" in schema:
        return draw(instance(draw(st.sampled_from(schema["anyOf"])), root))
    if "oneOf" in schema:
        return draw(instance(draw(st.sampled_from(schema["oneOf"])), root))
    if "const" in schema:
        return schema["const"]
    if schema.get("nullable") and draw(st.booleans()):
        return None
    return draw(_typed(schema, root))


def _typed(schema: dict[str, Any], root: Any) -> st.SearchStrategy[Any]:
    match schema.get("type"):
        case "string" if "enum" in schema:
            return st.sampled_from(schema["enum"])
        case "string" if "pattern" in schema:
            return st.from_regex(schema["pattern"])
        case "string":
            return st.text(min_size=schema.get("minLength", 0), max_size=schema.get("maxLength"))
        case "integer":
            ints = st.integers(schema.get("minimum"), schema.get("maximum"))
            return ints | ints.map(float)
        case "number":
            return (
                st.floats(-1.5, schema["maximum"], exclude_min=True)
                if "maximum" in schema
                else st.floats(allow_nan=False, allow_infinity=False)
            )
        case "boolean":
            return st.booleans()
        case "null":
            return st.none()
        case "array":
            items = schema.get("items", {})
            return st.lists(
                instance(items, root) if items else json_values,
                min_size=schema.get("minItems", 0),
                max_size=schema.get("maxItems"),
            )
        case "object":
            return _objects(schema, root)
    return json_values


@st.composite
def _objects(draw: st.DrawFn, schema: dict[str, Any], root: Any) -> dict[str, Any]:
    properties = schema["properties"]
    present = (
        set(schema["required"]) | draw(st.sets(st.sampled_from(sorted(properties)))) if properties else set()
    )
    value = {name: draw(instance(properties[name], root)) for name in present}
    additional = schema.get("additionalProperties", True)
    if additional is not False:
        # Extra keys never look like a declared name, which coercion would rename.
        extras = draw(
            st.dictionaries(
                st.sampled_from(["zz1", "zz2"]),
                instance(additional, root) if isinstance(additional, dict) else json_values,
                max_size=2,
            )
        )
        value.update(extras)
    keys = draw(st.permutations(sorted(value)))
    return {key: value[key] for key in keys}


@st.composite
def schema_and_instance(draw: st.DrawFn) -> tuple[Schema, Any]:
    schema = Schema.compile(draw(schemas))
    root = schema.generation_schema
    return schema, draw(instance(root, root))


@SETTINGS
@given(schema_and_instance())
def test_valid_instances_conform_unchanged_in_content(case: tuple[Schema, Any]) -> None:
    schema, value = case
    assert schema.validate(value) == []
    conformed, violations = schema.conform(value)
    assert violations == []
    assert conformed == value


@SETTINGS
@given(schema_and_instance())
def test_coercing_a_valid_instance_keeps_it_valid(case: tuple[Schema, Any]) -> None:
    schema, value = case
    assert schema.validate(schema.coerce(value)) == []


@SETTINGS
@given(schemas, json_values)
def test_validate_coerce_and_order_never_raise(raw: dict[str, Any], value: Any) -> None:
    schema = Schema.compile(raw)
    found = schema.validate(value)
    assert all(violation.path.startswith("$") for violation in found)
    schema.coerce(value)
    schema.order(value)
    schema.conform(value)
    schema.render_compact()
    schema.render_lines()


@SETTINGS
@given(schemas, json_values)
def test_coerce_is_idempotent_on_accepted_output(raw: dict[str, Any], value: Any) -> None:
    schema = Schema.compile(raw)
    coerced = schema.coerce(value)
    if not schema.validate(coerced):
        assert schema.validate(schema.coerce(coerced)) == []


def _described(node: Any, texts: list[str]) -> Any:
    """``node`` with a description from ``texts`` (cycled) on every schema object in it."""
    if isinstance(node, list):
        return [_described(child, texts) for child in node]
    if not isinstance(node, dict):
        return node
    copied = {key: _described(value, texts) if key != "enum" else value for key, value in node.items()}
    if "type" in node or "anyOf" in node or "const" in node:
        copied["description"] = texts[len(str(node)) % len(texts)]
    return copied


@SETTINGS
@given(schemas, st.lists(st.text(alphabet="ab\x00\\()\",- ", max_size=8), min_size=1, max_size=3))
def test_schemas_sharing_an_outline_render_and_warn_as_if_compiled_alone(
    raw: dict[str, Any], texts: list[str]
) -> None:
    # Two documents differing only in descriptions: the second reuses the first's outline.
    plain = Schema.compile(raw)
    schema = Schema.compile(_described(raw, texts))
    assert schema.render_lines() == render_lines(schema.generation_schema)
    assert schema.render_compact() == render_compact(schema.generation_schema)
    assert schema.warnings == plain.warnings == tuple(check_schema(schema.generation_schema))
