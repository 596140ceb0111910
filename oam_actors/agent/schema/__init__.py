"""The JSON Schema engine for tool arguments and structured output (protocol §5).

Pure library code: no I/O. A :class:`Schema` is compiled once from a tool's ``parameters`` or
a turn's ``schema``; the agent loop then runs model output through :meth:`Schema.conform`.

Contract:

- :meth:`Schema.compile` accepts a schema object (``dict``), ``True`` (anything), ``False``
  (nothing) or JSON text of one of those. A malformed schema raises
  :class:`~oam_actors.errors.AgentError` ``invalid_schema`` with ``data.path`` (the parameter
  that held it) and ``data.schemaPath`` (a JSON pointer to the offending keyword). Keywords
  outside the supported subset are ignored with a warning; ``x-*`` keywords silently.
- Object schemas are *closed* (§5.3): every object declaring ``properties`` without
  ``additionalProperties`` gets ``"additionalProperties": false``, except ``allOf`` members.
  :attr:`Schema.generation_schema` is that closed schema, and everything below uses it.
- :meth:`Schema.coerce` applies the safe fixes of §5.4 and never raises; :meth:`Schema.validate`
  reports every violation (§5.5); :meth:`Schema.order` puts keys in declared order (§5.6);
  :meth:`Schema.example` is a small valid value for prompts.
- Checks, fixes and key order are compiled once per schema, on first use (closures per schema
  node), and equal documents of plain JSON compile to one shared :class:`Schema` (its ``raw`` is
  its own parse of the document, not the caller's value). Documents differing only in
  annotations (descriptions, titles, ``x-*`` but ``x-order``…; a crowd's reply schemas name each
  persona) share one outline: checked, warned about, compiled and rendered once, each schema's
  renderings having its own descriptions filled in. :meth:`Schema.described` makes such a
  schema from another without compiling anything.
- Values are plain JSON values (``dict``, ``list``, ``str``, ``int``, ``float``, ``bool``,
  ``None``); inputs are never mutated. ``pattern`` uses Python ``re.search`` semantics and
  lengths count code points.

Treat :attr:`Schema.raw` and :attr:`Schema.generation_schema` as read-only.
"""

from __future__ import annotations

import copy
import dataclasses
import functools
import re
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from oam_actors.errors import AgentError, ErrorCode

from ._check import SchemaCheckError, check_schema
from ._close import close_schema, placeholder, redescribed
from ._coerce import Coercer
from ._example import example
from ._flat import FlatConform, flat_conformer
from ._json import declared_types, keyword_dict, resolve
from ._order import Orderer
from ._render import render_compact, render_lines
from ._validate import Validator, Violation, format_violations

__all__ = ["Schema", "Violation", "format_violations"]

Violation.__module__ = __name__
format_violations.__module__ = __name__

_EMPTY_OBJECT = {"type": "object", "properties": {}}
_UNSET = object()
# Keywords that give an object schema something to fill in (§6.5 "Empty object").
_NOT_EMPTY = frozenset({"anyOf", "oneOf", "allOf", "$ref", "enum", "const", "items"})


@dataclasses.dataclass(frozen=True)
class Schema:
    """An immutable compiled schema. Build it with :meth:`compile` or :meth:`empty_object`."""

    raw: Any
    """The schema as given (parsed, when it was JSON text)."""
    generation_schema: Any
    """The closed schema that is enforced (a ``dict`` or a ``bool``)."""
    warnings: tuple[str, ...]
    """``'<pointer>: '<keyword>' is not supported and is ignored'``, in document order."""
    _shape: _Shape | None = dataclasses.field(default=None, compare=False, repr=False)
    """What this schema shares with every schema of its outline (see ``close_schema``)."""
    _descriptions: tuple[str, ...] = dataclasses.field(default=(), compare=False, repr=False)
    """The outline's placeholders filled in: this schema's string descriptions."""

    @classmethod
    def compile(cls, raw: Any, *, path: str = "schema") -> Schema:
        """Checks, closes and wraps ``raw`` (a ``dict``, ``True``/``False`` or JSON text of one).

        Raises :class:`AgentError` ``invalid_schema`` with ``path`` and ``schemaPath``.
        """
        parsed = _parse_text(raw, path) if isinstance(raw, str) else raw
        if not isinstance(parsed, (dict, bool)):
            raise _invalid(path, SchemaCheckError("#", "a schema must be a JSON object"))
        text = _plain_json_text(parsed)
        try:
            return _compile_json(text) if text is not None else cls._checked(parsed, plain=False)
        except SchemaCheckError as error:
            raise _invalid(path, error) from error

    @classmethod
    def _checked(cls, parsed: Any, *, plain: bool) -> Schema:
        """Closes and checks a schema value (``plain``: parsed from JSON text); raises
        :class:`SchemaCheckError`."""
        closed, outline, descriptions = close_schema(parsed)
        if outline is None:
            text = None
        else:
            text = msgspec.json.encode(outline) if plain else _plain_json_text(outline)
        if text is None:
            return cls(parsed, closed, tuple(check_schema(closed)))
        shape = _shape_of(text, len(descriptions))
        return cls(parsed, closed, shape.warnings, shape, tuple(descriptions))

    def described(self, descriptions: Sequence[str]) -> Schema:
        """This schema with other string descriptions, in document order: one outline, so what
        is compiled, checked and rendered of this one is shared (a crowd's reply schemas, each
        naming its persona, are made from one this way instead of compiled each). Raises
        ``ValueError`` when the outline is not shared (``$ref``) or the count differs."""
        if self._shape is None or len(descriptions) != len(self._descriptions):
            raise ValueError(f"a schema of a shared outline with {len(descriptions)} descriptions is needed")
        given = tuple(descriptions)
        raw = redescribed(self.raw, iter(given))
        # Already closed as given (a reply schema is): one copy serves as both.
        closed = raw if self.raw == self.generation_schema else redescribed(self.generation_schema, iter(given))
        return Schema(raw, closed, self.warnings, self._shape, given)

    @classmethod
    def empty_object(cls) -> Schema:
        """``{"type":"object","properties":{}}`` closed: the parameters of a tool without any."""
        return cls.compile(copy.deepcopy(_EMPTY_OBJECT))

    def coerce(self, value: Any) -> Any:
        """``value`` with the safe fixes of §5.4 applied; may still be invalid. Never raises.

        ``value`` is not mutated; parts that needed no fix may be shared with the result.
        """
        return _coercer_for(self._validator).coerce(value)

    def validate(self, value: Any) -> list[Violation]:
        """Every way ``value`` fails the closed schema; empty when it is valid."""
        return self._validator.violations(value)

    def order(self, value: Any) -> Any:
        """``value`` with object keys in the schema's declared order, recursively (§5.6)."""
        return self._orderer.order(value)

    def conform(self, value: Any) -> tuple[Any, list[Violation]]:
        """Coerce, validate, and order when valid: ``(value, violations)``.

        With violations the coerced value comes back unordered, for the repair prompt.
        """
        fast = _flat_for(self._validator)
        if fast is not None and (ordered := fast(value)) is not None:
            return ordered, []
        coerced = self.coerce(value)
        found = self.validate(coerced)
        return (coerced, found) if found else (self.order(coerced), found)

    @property
    def _validator(self) -> Validator:
        """The checks of the closed schema, compiled on first use and kept (per outline)."""
        if self._shape is not None:
            return self._shape.validator
        return self.derived("validator", Validator)

    @property
    def _orderer(self) -> Orderer:
        """The key order of the closed schema, compiled on first use and kept (per outline)."""
        if self._shape is not None:
            return self._shape.orderer
        return self.derived("orderer", Orderer)

    def render_compact(self) -> str:
        """The one-line form for tool catalogs (§5.7). Computed once: every decide step shows it."""
        return self.derived("compact", lambda _: self._rendered(render_compact))

    def render_lines(self) -> str:
        """The key-per-line form for argument and structured steps (§5.7). Computed once."""
        return self.derived("lines", lambda _: self._rendered(render_lines))

    def _rendered(self, render: Callable[[Any], str]) -> str:
        """``render(generation_schema)``: the outline's rendering once per outline, with this
        schema's descriptions put in for the placeholders (the rendering copies them verbatim)."""
        template = None if self._shape is None else self._shape.template(render)
        if template is None:
            return render(self.generation_schema)
        return _PLACEHOLDER.sub(lambda found: self._descriptions[int(found[1])], template)

    def example(self) -> Any:
        """A small valid value to show the model (required properties, first enum choice, lower
        bounds). Computed once; treat it as read-only."""
        return self.derived("example", example)

    def derived(self, name: str, compute: Callable[[Any], Any]) -> Any:
        """``compute(generation_schema)``, memoised under ``name``: the schema is immutable, so
        texts derived from it (renderings, prompt examples) are computed once per schema."""
        cache = self.__dict__.get("_derived")
        if cache is None:
            cache = self.__dict__["_derived"] = {}
        value = cache.get(name, _UNSET)
        if value is _UNSET:
            value = cache[name] = compute(self.generation_schema)
        return value

    @property
    def is_empty_object(self) -> bool:
        """True for an object schema with nothing to fill in: a tool that takes no arguments.

        ``True`` (anything) counts, as ``{}`` does. Computed once (every turn asks), per outline when it is shared.
        """
        if self._shape is not None:
            return self._shape.is_empty_object
        return self.derived("is_empty_object", _is_empty_object)

    @property
    def root_is_array(self) -> bool:
        """True when the root (after ``$ref``) is an array schema: structured output is a list.
        Computed once (every structured step asks), per outline when it is shared."""
        if self._shape is not None:
            return self._shape.root_is_array
        return self.derived("root_is_array", _root_is_array)


def _is_empty_object(schema: Any) -> bool:
    if isinstance(schema, bool):
        return schema
    return (
        schema.get("type", "object") == "object"
        and not keyword_dict(schema, "properties")
        and _NOT_EMPTY.isdisjoint(schema)
    )


def _root_is_array(schema: Any) -> bool:
    root = resolve(schema, schema)
    if not isinstance(root, dict):
        return False
    types = declared_types(root)
    return "array" in types if types is not None else "items" in root


# Every session states its tools, every structured turn its schema: the same documents come back
# again and again, and a compiled schema is immutable, so equal documents share one (with its
# compiled checks and renderings). Bounded: a crowd of one-off schemas only cycles through it.
_SHARED_SCHEMAS = 1024


@functools.lru_cache(maxsize=_SHARED_SCHEMAS)
def _compile_json(text: bytes) -> Schema:
    """The schema of a JSON text (its own parse of it, so no caller's value is shared)."""
    return Schema._checked(msgspec.json.decode(text), plain=True)


_PLACEHOLDER = re.compile(placeholder(0).replace("0", "([0-9]+)"))


class _Shape:
    """What schemas of one outline share: warnings, compiled checks and order, renderings."""

    def __init__(self, outline_text: bytes, descriptions: int) -> None:
        self.outline = msgspec.json.decode(outline_text)
        self.warnings = tuple(check_schema(self.outline))
        self.validator = Validator(self.outline)
        self.orderer = Orderer(self.outline)
        # The descriptions filled in change no kind: every schema of the outline has these.
        self.is_empty_object = _is_empty_object(self.outline)
        self.root_is_array = _root_is_array(self.outline)
        # A placeholder shows in a rendering only where its description would; it is told apart
        # from the document's own text only when no other string holds a NUL (JSON escapes it).
        self.fillable = outline_text.count(b"\\u0000") == 2 * descriptions
        self._templates: dict[Callable[[Any], str], str] = {}

    def template(self, render: Callable[[Any], str]) -> str | None:
        """``render(outline)``, kept; ``None`` when its placeholders cannot be told apart."""
        if not self.fillable:
            return None
        if render not in self._templates:
            self._templates[render] = render(self.outline)
        return self._templates[render]


@functools.lru_cache(maxsize=_SHARED_SCHEMAS)
def _shape_of(outline_text: bytes, descriptions: int) -> _Shape:
    """The shape of an outline with that many placeholders; raises :class:`SchemaCheckError`
    (not kept) when malformed."""
    return _Shape(outline_text, descriptions)


@functools.lru_cache(maxsize=_SHARED_SCHEMAS)
def _coercer_for(validator: Validator) -> Coercer:
    """The compiled fixes that go with ``validator`` (whose checks decide between alternatives)."""
    return Coercer(validator)


@functools.lru_cache(maxsize=_SHARED_SCHEMAS)
def _flat_for(validator: Validator) -> FlatConform | None:
    """The fast path of :meth:`Schema.conform` for ``validator``'s schema, if it is flat."""
    return flat_conformer(validator.root)


def _plain_json_text(value: Any) -> bytes | None:
    """``value``'s JSON text when the text stands for exactly ``value`` (plain JSON values);
    ``None`` for anything else (tuples, NaN, non-string keys…), which is compiled on its own."""
    try:
        text = msgspec.json.encode(value)
        same = msgspec.json.decode(text) == value
    except (TypeError, ValueError, OverflowError, RecursionError, msgspec.MsgspecError):
        return None
    return text if same else None


def _parse_text(text: str, path: str) -> Any:
    try:
        return msgspec.json.decode(text)
    except msgspec.DecodeError as error:
        raise _invalid(path, SchemaCheckError("#", f"the schema is not valid JSON: {error}")) from error


def _invalid(path: str, error: SchemaCheckError) -> AgentError:
    return AgentError(
        ErrorCode.INVALID_SCHEMA,
        f"{path}: {error.reason} (at {error.pointer})",
        path=path,
        schemaPath=error.pointer,
    )
