"""The registries of cells and tasks, and what a class says about itself.

    registry = Registry("cell", builtins={"rnn": "stability.cells.rnn:ElmanRNN", ...}, check=check_cell)
    registry.get("rnn")                      # the class, its module imported on first use
    registry.get("mylab.cells:LeakyRNN")     # imported, checked, registered under that very string
    registry.register("leaky", LeakyRNN)     # ValueError on a name clash unless replace=True
    registry.names()                         # built-ins, then plugins and registered names

Where a name comes from, in this order:

1. the built-ins, each imported when first asked for;
2. ``register(name, cls)`` in this process;
3. installed plugins, read once, on the first :meth:`Registry.names` or the first
   look-up of a name not known yet: the entry points of group ``stability.cells``
   (``stability.tasks``) of every installed distribution, and the
   ``name=module:Class`` entries (comma-separated) of ``$STABILITY_CELLS``
   (``$STABILITY_TASKS``).  A plugin that fails to import, breaks the contract or
   takes a name already in use is left out with one :class:`PluginWarning` line
   naming it; the rest are unaffected;
4. a name of the form ``package.module:Class``: imported, checked and registered
   under that string, so a stored config that names it builds it again in any
   process that can import the module (a background worker, a later ``resume``).

``register()`` of a class that can be imported by its module path also adds
``name=module:Class`` to ``$STABILITY_CELLS`` (``$STABILITY_TASKS``) in this
process's environment: background workers started from here inherit it and
find the same class under the same name.

What the dashboard and the CLI show about a class (:func:`option_infos`,
:func:`own_text`) is read from the class itself: class attributes where it
has them, the ``__init__`` signature and the docstring where it has not.
"""
from __future__ import annotations

import importlib
import importlib.metadata
import inspect
import math
import os
import threading
import warnings
from dataclasses import dataclass
from typing import Any, Callable

from .errors import one_line


class PluginWarning(UserWarning):
    """A cell or task plugin was left out; the message names it and says why."""


# Note [Finite options]
# ---------------------
# A float option that a class declares with an open side (``angle_init: (0.0, None)``) or no range at all
# would take 1e308, inf or nan from a form, a link or a sweep, and fail deep inside torch after the
# server has spent its time (issue 33: angle_init=1e308 overflowed float32 while building a VPRNN). So the
# bounds validation holds a float option to (OptionInfo.bounds) close every open side at
# FLOAT_OPTION_LIMIT, far beyond any value of the papers (a gain, a slope, an angle, a logit); nan and inf
# are refused; the class's own check stays the authority inside those bounds (OptionInfo.range is what it
# declares, unchanged).
FLOAT_OPTION_LIMIT = 1e6


@dataclass(frozen=True)
class OptionInfo:
    """One option of a cell or task, as its class declares it.

    ``type``: the annotation as written (``"int"``, ``"float"``, ``"int | None"``, ...), or the
    default's type name where there is none. ``default``: None where ``required``.
    ``choices``: the only values accepted, or None. ``range``: closed bounds ``(low, high)``
    within which every accepted value lies (None for an open side); the class's own check stays
    the authority (it may refuse a bound, or a combination). ``in_form``: False for what the
    dashboard does not ask a person for (folders, callbacks, sizes derived from the data).
    """

    name: str
    type: str
    default: Any = None
    required: bool = False
    choices: tuple | None = None
    range: tuple | None = None
    help: str = ""
    in_form: bool = True

    @property
    def base_type(self) -> str:
        """The type without ``| None``: ``"int"`` for ``"int | None"``."""
        parts = [part.strip() for part in self.type.split("|")]
        return " | ".join(part for part in parts if part != "None") or "None"

    @property
    def optional(self) -> bool:
        """None is a value of this option (``int | None``, ``Optional[int]``)."""
        return "None" in [part.strip() for part in self.type.split("|")] or self.type.startswith("Optional[")

    @property
    def bounds(self) -> tuple | None:
        """The closed bounds validation holds the option to: ``range``, with a float option's open sides at
        -/+ :data:`FLOAT_OPTION_LIMIT` (Note [Finite options]); ``range`` itself for any other option."""
        if self.base_type != "float":
            return self.range
        low, high = self.range or (None, None)
        return (-FLOAT_OPTION_LIMIT if low is None else low, FLOAT_OPTION_LIMIT if high is None else high)

    def number_problem(self, value: Any) -> str | None:
        """Why ``value`` is not a number this float option takes (nan, inf, or outside :attr:`bounds`), or None;
        a value that is not a number, and any option not a float, is left to the class's own check."""
        if self.base_type != "float" or isinstance(value, bool) or not isinstance(value, (int, float)):
            return None
        low, high = self.bounds
        try:
            inside = math.isfinite(float(value)) and low <= value <= high
        except OverflowError:  # an int beyond any float
            inside = False
        text = repr(value) if len(repr(value)) <= 24 else f"{repr(value)[:12]}... ({len(repr(value))} digits)"
        return None if inside else f"must be a finite number from {low:g} to {high:g}; got {text}"

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "type": self.type, "default": _jsonable(self.default),
                "required": self.required, "choices": list(self.choices) if self.choices else None,
                "range": list(self.range) if self.range else None, "help": self.help, "in_form": self.in_form}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (tuple, list)):
        return [_jsonable(item) for item in value]
    return repr(value)


# ------------------------------------------------------------------ reading a class
def own_text(cls: type, attribute: str) -> str:
    """``cls``'s own ``attribute`` (not inherited: a subclass is another model), else ``""``."""
    value = vars(cls).get(attribute)
    return value if isinstance(value, str) else ""


def own_lines(cls: type, attribute: str) -> tuple[str, ...]:
    """``cls``'s own ``attribute`` as a tuple of lines (a string is one line), else ``()``."""
    value = vars(cls).get(attribute)
    if isinstance(value, str):
        return (value,)
    return tuple(str(line) for line in value) if value else ()


def docstring_line(cls: type) -> str:
    """The first line of ``cls``'s own docstring, else its name."""
    doc = inspect.cleandoc(vars(cls).get("__doc__") or "")
    return doc.splitlines()[0].strip() if doc else cls.__name__


def merged(cls: type, attribute: str) -> dict:
    """The dict ``attribute`` merged along the MRO, a subclass's entries over its bases'."""
    result: dict = {}
    for klass in reversed(cls.__mro__):
        result.update(vars(klass).get(attribute) or {})
    return result


def merged_names(cls: type, attribute: str) -> set:
    """The union along the MRO of the collections of names ``attribute``."""
    return {name for klass in cls.__mro__ for name in (vars(klass).get(attribute) or ())}


def option_parameters(cls: type, *, positional: int, skip: tuple[str, ...] = ()) -> list[inspect.Parameter]:
    """The parameters of ``cls(...)`` that are options: every named one after the first
    ``positional`` positional ones (``input_size, hidden_size`` of a cell), minus ``skip``."""
    chosen = []
    for index, parameter in enumerate(inspect.signature(cls).parameters.values()):
        if parameter.kind in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD) or parameter.name in skip:
            continue
        if parameter.kind is not parameter.KEYWORD_ONLY and index < positional:
            continue
        chosen.append(parameter)
    return chosen


def annotation_text(parameter: inspect.Parameter) -> str:
    """The annotation as written (``"int | None"``), or the default's type where there is none."""
    annotation = parameter.annotation
    if annotation is parameter.empty:
        default = parameter.default
        return "any" if default is parameter.empty or default is None else type(default).__name__
    return annotation if isinstance(annotation, str) else inspect.formatannotation(annotation)


def option_infos(cls: type, *, positional: int, skip: tuple[str, ...] = ()) -> tuple[OptionInfo, ...]:
    """Every option of ``cls`` with what the class declares about it: ``option_help``,
    ``option_choices`` and ``option_ranges`` (dicts by option name) and ``form_hidden_options``
    (names), each merged along the MRO, so a base class's entries serve its subclasses."""
    helps, choices = merged(cls, "option_help"), merged(cls, "option_choices")
    ranges, hidden = merged(cls, "option_ranges"), merged_names(cls, "form_hidden_options")
    infos = []
    for parameter in option_parameters(cls, positional=positional, skip=skip):
        name, required = parameter.name, parameter.default is parameter.empty
        infos.append(OptionInfo(
            name=name, type=annotation_text(parameter), default=None if required else parameter.default,
            required=required, choices=tuple(choices[name]) if name in choices else None,
            range=tuple(ranges[name]) if name in ranges else None, help=str(helps.get(name, "")),
            in_form=name not in hidden))
    return tuple(infos)


def import_path(cls: type) -> str | None:
    """``"module:Qualified.Name"`` when importing that gives back ``cls``, else None."""
    module, qualname = getattr(cls, "__module__", None), getattr(cls, "__qualname__", "")
    if not module or module == "__main__" or "<" in qualname:
        return None
    try:
        found = _attribute_path(importlib.import_module(module), qualname)
    except Exception:  # noqa: BLE001 - whatever the module does on import, the answer is "no"
        return None
    return f"{module}:{qualname}" if found is cls else None


def _attribute_path(obj: Any, qualname: str) -> Any:
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return obj


# ------------------------------------------------------------------------- registry
class Registry:
    """Names of one kind of class (cells or tasks); see the module docstring."""

    def __init__(self, kind: str, *, builtins: dict[str, type | str], check: Callable[[str, Any], None]):
        self.kind = kind
        self.group = f"stability.{kind}s"
        self.env_var = f"STABILITY_{kind.upper()}S"
        self._builtins = dict(builtins)
        self._entries: dict[str, type | str] = dict(builtins)  # a str: "module:Class", not imported yet
        self._check = check
        self._plugins: set[str] = set()
        self._discovered = False
        self._lock = threading.RLock()

    # ------------------------------------------------------------------ reading
    def names(self) -> list[str]:
        """Every name :meth:`get` accepts without importing anything new: built-ins first."""
        self.discover()
        return list(self._entries)

    def get(self, name: str) -> type:
        """The class registered as ``name``; a ``module:Class`` name is imported and registered.
        ValueError (one line) for an unknown name or a module that cannot be imported."""
        with self._lock:
            if isinstance(name, str) and name not in self._entries:
                self.discover()
                if ":" in name and name not in self._entries:
                    return self._import(name)
            try:
                entry = self._entries[name]
            except (KeyError, TypeError):
                raise ValueError(f"unknown {self.kind} {name!r}; valid {self.kind}s: "
                                 f"{', '.join(self.names())}") from None
            if isinstance(entry, str):  # a built-in: import it now
                entry = self._entries[name] = _attribute_path(
                    importlib.import_module(entry.partition(":")[0]), entry.partition(":")[2])
            return entry

    # ------------------------------------------------------------------ writing
    def register(self, name: str, cls: type, *, replace: bool = False) -> type:
        """Register ``cls`` as ``name``; returns ``cls``.  ValueError when the name is taken by
        another class (unless ``replace``) or when ``cls`` does not keep the contract."""
        self._check_name(name, cls)
        self._check(name, cls)
        with self._lock:
            self.discover()
            current = self._entries.get(name)
            if current is not None and current is not cls and not replace:
                taken = current if isinstance(current, str) else import_path(current) or current.__qualname__
                raise ValueError(f"{self.kind} name {name!r} is already taken by {taken}; "
                                 f"pass replace=True to replace it")
            self._entries[name] = cls
            self._plugins.discard(name)
            self._export(name, import_path(cls))
        return cls

    def unregister(self, name: str) -> None:
        """Forget ``name``; a replaced built-in comes back, a built-in itself stays."""
        with self._lock:
            if name in self._builtins:
                self._entries[name] = self._builtins[name]
            elif self._entries.pop(name, None) is None:
                raise ValueError(f"no {self.kind} {name!r} is registered")
            self._plugins.discard(name)
            self._export(name, None)

    def discover(self, *, again: bool = False) -> None:
        """Read the installed plugins (entry points and ``$STABILITY_CELLS``/``TASKS``) once;
        ``again``: forget the ones read before and read them afresh (after installing one)."""
        with self._lock:
            if self._discovered and not again:
                return
            self._discovered = True
            for name in self._plugins:
                self._entries.pop(name, None)
            self._plugins = set()
            for name, target, load in self._plugin_sources():
                self._add_plugin(name, target, load)

    # ------------------------------------------------------------------ inside
    def _plugin_sources(self):
        """(name, where, loader) of every entry point of the group, then of the environment."""
        try:
            points = importlib.metadata.entry_points(group=self.group)
        except Exception as error:  # noqa: BLE001 - a broken installation must not hide the built-ins
            _warn(f"could not read the {self.group} entry points: {one_line(error, named=True)}")
            points = ()
        for point in points:
            yield point.name, point.value, point.load
        for item in os.environ.get(self.env_var, "").split(","):
            name, sep, target = item.strip().partition("=")
            if item.strip():
                yield name.strip(), target.strip(), (lambda target=target: self._load_path(target.strip()))

    def _add_plugin(self, name: str, target: str, load: Callable[[], Any]) -> None:
        label = f"{self.kind} plugin {name!r} ({target})"
        current = self._entries.get(name)
        try:
            cls = load()
            if current is not None and current is not cls:
                taken = current if isinstance(current, str) else current.__qualname__
                raise ValueError(f"the name is taken by {taken}")
            if current is cls:
                return  # registered here and exported for the workers: already known
            self._check_name(name, cls)
            self._check(name, cls)
        except Exception as error:  # noqa: BLE001 - any failure of someone else's code
            _warn(f"skipped {label}: {one_line(error, named=True)}")
            return
        self._entries[name] = cls
        self._plugins.add(name)

    def _load_path(self, path: str) -> Any:
        module_name, sep, qualname = path.partition(":")
        if not sep or not module_name or not qualname:
            raise ValueError(f"{self.kind} {path!r}: expected the form package.module:Class")
        try:
            module = importlib.import_module(module_name)
        except Exception as error:  # noqa: BLE001 - ImportError, or whatever the module raises
            raise ValueError(f"cannot import {self.kind} {path!r}: {one_line(error, named=True)}") from None
        try:
            return _attribute_path(module, qualname)
        except AttributeError:
            raise ValueError(f"cannot import {self.kind} {path!r}: module {module_name!r} has no "
                             f"{qualname!r}") from None

    def _import(self, path: str) -> type:
        cls = self._load_path(path)
        self._check(path, cls)
        self._entries[path] = cls
        return cls

    def _check_name(self, name: str, cls: Any) -> None:
        if not isinstance(name, str) or not name or any(c.isspace() or c in ",=" for c in name):
            raise ValueError(f"a {self.kind} name must be a non-empty string without spaces, commas "
                             f"or '='; got {name!r}")
        if ":" in name and name != import_path(cls):
            raise ValueError(f"{self.kind} name {name!r}: a name with ':' must be the class's own "
                             f"import path ({import_path(cls) or 'it has none'})")

    def _export(self, name: str, path: str | None) -> None:
        """Keep ``$STABILITY_<KIND>S`` in step with what ``register()`` added, for worker processes."""
        items = [item for item in os.environ.get(self.env_var, "").split(",")
                 if item.strip() and item.partition("=")[0].strip() != name]
        if path is not None and ":" not in name:
            items.append(f"{name}={path}")
        if items:
            os.environ[self.env_var] = ",".join(items)
        else:
            os.environ.pop(self.env_var, None)


def _warn(message: str) -> None:
    """One line on stderr (no source line under it), filterable as a :class:`PluginWarning`."""
    warnings.warn_explicit(message, PluginWarning, filename="stability", lineno=0, module="stability.core.registry")
