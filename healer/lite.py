"""Plain record classes for `healer loop run`'s start-up path, built without generating code.

`dataclasses.dataclass` writes the source of `__init__`, `__repr__`, `__eq__`, `__hash__` and (frozen)
`__setattr__`/`__delattr__` for every class and compiles each one, and it imports `inspect` (with `ast`,
`dis`, `tokenize`) to word a docstring: measured on the loop's ~20 record classes, that was about half of
the CPU its imports cost, paid again by every `healer loop run` the dispatcher launches. `lite.dataclass`
gives the same methods from shared closures over the class's field list.

Only what those classes use is supported, with the stdlib's behaviour (tests/loop/test_lite.py compares
the two class by class): fields from the class's own annotations, in order; defaults; `field(default_factory=...)`;
`frozen=True` (assignment raises `FrozenInstanceError`, an AttributeError, and the instance is hashable
by its fields); `eq` by class and fields; the stdlib's repr. No inheritance of fields, `__post_init__`,
`InitVar`, `ClassVar`, `slots`, `order` or keyword-only fields: a class that needs one of them stays a
`dataclasses.dataclass`. `dataclasses.replace`, `fields` and `asdict` do not know these classes; `replace`
and `field_names` here do the same.
"""

from __future__ import annotations

TYPE_CHECKING = False  # not typing's: `healer loop run` never imports typing
if TYPE_CHECKING:
    from typing import dataclass_transform
else:
    def dataclass_transform(**_kw):
        return lambda f: f

_MISSING = object()
_SETATTR = object.__setattr__


class FrozenInstanceError(AttributeError):
    """Assignment to a field of a frozen instance (the stdlib's dataclasses.FrozenInstanceError)."""


class _Factory:
    __slots__ = ("make",)

    def __init__(self, make) -> None:
        self.make = make


def field(*, default_factory):
    """A field whose default is made afresh for every instance (`dataclasses.field(default_factory=...)`)."""
    return _Factory(default_factory)


def _fields(cls) -> tuple[tuple[str, object], ...]:
    """(name, default or a _Factory or _MISSING) for each field of `cls`, in order."""
    out = []
    seen_default = False
    for name in cls.__dict__.get("__annotations__", {}):
        default = cls.__dict__.get(name, _MISSING)
        if default is _MISSING:
            if seen_default:
                raise TypeError(f"non-default argument {name!r} follows default argument")
        else:
            seen_default = True
            if isinstance(default, _Factory):
                delattr(cls, name)  # as the stdlib does: no class attribute for a factory field
        out.append((name, default))
    return tuple(out)


def _make_init(fields: tuple[tuple[str, object], ...], frozen: bool, qualname: str):
    where = f"{qualname}.__init__()"
    names = tuple(n for n, _ in fields)
    index = {n: i for i, n in enumerate(names)}
    nfields = len(fields)
    nrequired = sum(1 for _, d in fields if d is _MISSING)
    takes = f"{nfields + 1}" if nrequired == nfields else f"from {nrequired + 1} to {nfields + 1}"

    def __init__(self, *args, **kwargs):
        if len(args) > nfields:
            raise TypeError(f"{where} takes {takes} positional arguments but {len(args) + 1} were given")
        values = list(args) + [_MISSING] * (nfields - len(args))
        for k, v in kwargs.items():
            i = index.get(k)
            if i is None:
                raise TypeError(f"{where} got an unexpected keyword argument {k!r}")
            if i < len(args):
                raise TypeError(f"{where} got multiple values for argument {k!r}")
            values[i] = v
        missing = []
        for i, (name, default) in enumerate(fields):
            v = values[i]
            if v is _MISSING:
                if default is _MISSING:
                    missing.append(name)
                    continue
                v = default.make() if isinstance(default, _Factory) else default
            if frozen:
                _SETATTR(self, name, v)
            else:
                setattr(self, name, v)
        if missing:
            shown = " and ".join(repr(m) for m in missing) if len(missing) <= 2 else \
                ", ".join(repr(m) for m in missing[:-1]) + f", and {missing[-1]!r}"
            raise TypeError(f"{where} missing {len(missing)} required positional argument"
                            f"{'s' if len(missing) > 1 else ''}: {shown}")

    return __init__


@dataclass_transform(field_specifiers=(field,))  # type checkers read these classes as dataclasses
def dataclass(cls=None, /, *, frozen: bool = False):
    """`@dataclass` or `@dataclass(frozen=True)`, as the stdlib's for the supported subset (see above)."""

    def wrap(cls):
        fields = _fields(cls)
        names = tuple(n for n, _ in fields)

        def __repr__(self):
            return f"{self.__class__.__qualname__}({', '.join(f'{n}={getattr(self, n)!r}' for n in names)})"

        def __eq__(self, other):
            if other.__class__ is not self.__class__:
                return NotImplemented
            return tuple(getattr(self, n) for n in names) == tuple(getattr(other, n) for n in names)

        def __hash__(self):
            return hash(tuple(getattr(self, n) for n in names))

        def __setattr__(self, name, value):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot assign to field {name!r}")
            _SETATTR(self, name, value)

        def __delattr__(self, name):
            if type(self) is cls or name in names:
                raise FrozenInstanceError(f"cannot delete field {name!r}")
            object.__delattr__(self, name)

        own = cls.__dict__
        methods = {"__init__": _make_init(fields, frozen, cls.__qualname__), "__repr__": __repr__, "__eq__": __eq__}
        for name, fn in methods.items():
            if name not in own:
                fn.__qualname__ = f"{cls.__qualname__}.{name}"
                setattr(cls, name, fn)
        if frozen:
            for name, fn in (("__setattr__", __setattr__), ("__delattr__", __delattr__)):
                if name in own:
                    raise TypeError(f"cannot overwrite attribute {name} in class {cls.__name__}")
                fn.__qualname__ = f"{cls.__qualname__}.{name}"
                setattr(cls, name, fn)
        if "__hash__" not in own or own["__hash__"] is None:  # the stdlib's rule for eq=True
            cls.__hash__ = __hash__ if frozen else None
        cls.__match_args__ = names
        cls.__lite_fields__ = names
        cls.__lite_spec__ = (fields, frozen)  # for tests/loop/test_lite.py's comparison with the stdlib
        return cls

    return wrap if cls is None else wrap(cls)


def field_names(cls_or_instance) -> tuple[str, ...]:
    return cls_or_instance.__lite_fields__


def replace(obj, /, **changes):
    """A copy of `obj` with `changes` (`dataclasses.replace`)."""
    names = obj.__lite_fields__
    return obj.__class__(**{**{n: getattr(obj, n) for n in names}, **changes})


class Pattern:
    """A regular expression compiled the first time it is used (`re.compile`'s object otherwise): a
    module imported by `healer loop run` whose pattern serves only some runs (a failpoint spec, a
    `--run-id`, a gate's failure text) does not make every run compile it."""

    __slots__ = ("_src", "_flags", "_re")

    def __init__(self, src, flags: int = 0) -> None:
        self._src, self._flags, self._re = src, flags, None

    def get(self):
        if self._re is None:
            import re

            self._re = re.compile(self._src, self._flags)
        return self._re

    def sub(self, repl, text, count: int = 0):
        return self.get().sub(repl, text, count)

    def search(self, text):
        return self.get().search(text)

    def match(self, text):
        return self.get().match(text)

    def fullmatch(self, text):
        return self.get().fullmatch(text)

    def findall(self, text):
        return self.get().findall(text)

    def __getattr__(self, name: str):
        return getattr(self.get(), name)
