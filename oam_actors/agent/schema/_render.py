"""How the model sees a schema (private, protocol §5.7).

Plain words rather than TypeScript unions: small models copy ``"a" | "b"`` into their JSON,
but not ``one of "a", "b"``.
"""

from __future__ import annotations

from typing import Any, Final

from ._json import (
    MISSING,
    declared_types,
    json_text,
    keyword_dict,
    keyword_list,
    keyword_number,
    plain_number,
    required_names,
    resolve,
    resolve_pointer,
    whole,
)

__all__ = ["render_compact", "render_lines"]

_MAX_DEPTH: Final = 8


def render_compact(root: Any) -> str:
    """One line: ``{"item": one of "ale", "stew" (menu item), "quantity"?: integer 1-10}``."""
    return _Renderer(root).node(root, 0, frozenset())


def render_lines(root: Any) -> str:
    """One line per property: ``- "name" (optional): <compact type>, <description>``.

    Schemas that are not objects with properties fall back to :func:`render_compact`.
    """
    renderer = _Renderer(root)
    schema = resolve(root, root)
    properties = keyword_dict(schema, "properties") if isinstance(schema, dict) else {}
    types = declared_types(schema) if isinstance(schema, dict) else None
    if not properties or (types is not None and "object" not in types):
        return renderer.node(root, 0, frozenset())
    required = set(required_names(schema))
    lines = []
    for name, child in properties.items():
        optional = "" if name in required else " (optional)"
        described = renderer.description(child)
        suffix = f", {described}" if described is not None else ""
        lines.append(f'- "{name}"{optional}: {renderer.node(child, 1, frozenset())}{suffix}')
    return "\n".join(lines)


def _range(low: int | None, high: int | None, unit: str) -> str:
    if low is not None and high is not None:
        return f" (exactly {low}{unit})" if low == high else f" ({low}-{high}{unit})"
    if low is not None:
        return f" (at least {low}{unit})"
    return f" (at most {high}{unit})" if high is not None else ""


class _Renderer:
    def __init__(self, root: Any) -> None:
        self.root = root

    def description(self, node: Any) -> str | None:
        for candidate in (resolve(self.root, node), node):
            if isinstance(candidate, dict) and isinstance(candidate.get("description"), str):
                return candidate["description"]
        return None

    def node(self, node: Any, depth: int, refs: frozenset[str]) -> str:
        if isinstance(node, bool):
            return "any" if node else "never"
        if not isinstance(node, dict):
            return "any"
        ref = node.get("$ref")
        if isinstance(ref, str):
            return self.ref(ref, depth, refs)
        if depth > _MAX_DEPTH:
            return "…"
        if (allowed := keyword_list(node, "enum")) is not None:
            if len(allowed) == 1:
                return f"exactly {json_text(allowed[0])}"
            return "one of " + ", ".join(json_text(choice) for choice in allowed)
        if "const" in node:
            return f"exactly {json_text(node['const'])}"
        choices = keyword_list(node, "anyOf")
        if choices is None:
            choices = keyword_list(node, "oneOf")
        if choices is not None:
            return " or ".join(self.node(choice, depth + 1, refs) for choice in choices)
        if (parts := keyword_list(node, "allOf")) is not None:
            return " and also ".join(self.node(part, depth + 1, refs) for part in parts)
        types = declared_types(node)
        if types is None:
            if "properties" in node:
                types = ["object"]
            elif "items" in node:
                types = ["array"]
            else:
                return "any"
        return " or ".join(self.typed(name, node, depth, refs) for name in types)

    def ref(self, ref: str, depth: int, refs: frozenset[str]) -> str:
        # A recursive or very deep reference is shown by its name instead of expanded again.
        if ref in refs or depth > _MAX_DEPTH:
            return ref.rsplit("/", 1)[-1] or "object"
        target = resolve_pointer(self.root, ref)
        if target is MISSING:
            return "any"
        return self.node(target, depth + 1, refs | {ref})

    def typed(self, name: str, node: dict[str, Any], depth: int, refs: frozenset[str]) -> str:
        match name:
            case "object":
                return self.object(node, depth, refs)
            case "array":
                items = self.node(node["items"], depth + 1, refs) if "items" in node else "any"
                return f"[{items}, …]" + _range(
                    whole(node.get("minItems")), whole(node.get("maxItems")), " items"
                )
            case "string":
                pattern = node.get("pattern")
                matching = f" matching /{pattern}/" if isinstance(pattern, str) else ""
                lengths = _range(whole(node.get("minLength")), whole(node.get("maxLength")), " chars")
                return f"string{matching}{lengths}"
            case "integer" | "number":
                return name + _numeric_bounds(node)
            case "boolean":
                return "true or false"
        return name

    def object(self, node: dict[str, Any], depth: int, refs: frozenset[str]) -> str:
        properties = keyword_dict(node, "properties")
        if not properties:
            additional = node.get("additionalProperties")
            if isinstance(additional, dict):
                return f"{{[key: string]: {self.node(additional, depth + 1, refs)}}}"
            return "{}"
        required = set(required_names(node))
        fields = []
        for name, child in properties.items():
            optional = "" if name in required else "?"
            described = self.description(child)
            suffix = f" ({described})" if described is not None else ""
            fields.append(f'"{name}"{optional}: {self.node(child, depth + 1, refs)}{suffix}')
        return "{" + ", ".join(fields) + "}"


def _numeric_bounds(node: dict[str, Any]) -> str:
    low, high = keyword_number(node, "minimum"), keyword_number(node, "maximum")
    text = ""
    if low is not None and high is not None:
        text = f" {plain_number(low)}-{plain_number(high)}"
    elif low is not None:
        text = f" >= {plain_number(low)}"
    elif high is not None:
        text = f" <= {plain_number(high)}"
    if (bound := keyword_number(node, "exclusiveMinimum")) is not None:
        text += f" > {plain_number(bound)}"
    if (bound := keyword_number(node, "exclusiveMaximum")) is not None:
        text += f" < {plain_number(bound)}"
    return text
