"""healer.lite builds the loop's record classes without generated code: each one must behave as the
stdlib's `dataclasses.dataclass` would for the same class (construction, defaults, repr, equality, hash,
frozen assignment, errors, replace), or the start-up saving would have changed the program."""

from __future__ import annotations

import copy
import dataclasses
import importlib
import pickle
import re
from pathlib import Path

import pytest

from healer import lite

ROOT = Path(__file__).resolve().parents[2]


def _lite_classes() -> list[type]:
    """Every class any healer module builds with healer.lite (found from the sources, so a new one is covered)."""
    out = []
    for path in sorted((ROOT / "healer").rglob("*.py")):
        if "from healer.lite import" not in path.read_text():
            continue
        mod = importlib.import_module(".".join(path.relative_to(ROOT).with_suffix("").parts))
        out += [c for c in vars(mod).values() if isinstance(c, type) and c.__module__ == mod.__name__
                and "__lite_spec__" in c.__dict__]
    return out


CLASSES = _lite_classes()


def _twin(cls: type) -> type:
    """The same class as the stdlib would build it."""
    fields, frozen = cls.__lite_spec__
    spec = []
    for name, default in fields:
        if default is lite._MISSING:
            spec.append((name, object))
        elif isinstance(default, lite._Factory):
            spec.append((name, object, dataclasses.field(default_factory=default.make)))
        else:
            spec.append((name, object, dataclasses.field(default=default)))
    twin = dataclasses.make_dataclass(cls.__name__, spec, frozen=frozen)
    twin.__qualname__ = cls.__qualname__
    return twin


def _values(cls: type, salt: str = "") -> list:
    return [f"{salt}{n}-value" for n in cls.__lite_fields__]


def _required(cls: type) -> list[str]:
    return [n for n, d in cls.__lite_spec__[0] if d is lite._MISSING]


def test_the_loop_path_builds_its_records_with_lite():
    names = {f"{c.__module__}.{c.__qualname__}" for c in CLASSES}
    for must in ("healer.loop.decide.IterationRecord", "healer.loop.state.RunState", "healer.procs.Completed",
                 "healer.git.Out", "healer.sandbox.Profile", "healer.loop.guard.GitSnap"):
        assert must in names


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_behaves_as_the_stdlib_dataclass(cls):
    twin = _twin(cls)
    frozen = cls.__lite_spec__[1]
    vals = _values(cls)
    a, t = cls(*vals), twin(*vals)
    assert repr(a) == repr(t)
    assert [getattr(a, n) for n in cls.__lite_fields__] == vals
    assert a == cls(*vals) and t == twin(*vals)
    assert a != t and not (a == t)  # another class: never equal, as between two dataclasses
    assert cls.__match_args__ == twin.__match_args__
    # keywords, defaults and fresh factory values
    req = {n: f"{n}-kw" for n in _required(cls)}
    b, u = cls(**req), twin(**req)
    assert repr(b) == repr(u)
    assert [getattr(b, n) for n in cls.__lite_fields__] == [getattr(u, n) for n in cls.__lite_fields__]
    for name, default in cls.__lite_spec__[0]:
        if isinstance(default, lite._Factory):
            assert getattr(cls(**req), name) is not getattr(b, name)
            assert name not in cls.__dict__  # no class attribute for a factory field, as the stdlib
    # one field differs: not equal
    for i in range(len(vals)):
        other = list(vals)
        other[i] = "changed"
        assert cls(*vals) != cls(*other)
    # hash and frozen-ness
    if frozen:
        assert hash(a) == hash(t) == hash(tuple(vals))
        for name in (cls.__lite_fields__[0], "not_a_field"):
            with pytest.raises(AttributeError) as e1:
                setattr(a, name, 1)
            with pytest.raises(AttributeError) as e2:
                setattr(t, name, 1)
            assert str(e1.value) == str(e2.value)
            with pytest.raises(AttributeError):
                delattr(a, name)
        assert isinstance(e1.value, lite.FrozenInstanceError)
    else:
        with pytest.raises(TypeError):
            hash(a)
        with pytest.raises(TypeError):
            hash(t)
        m = cls(*vals)
        setattr(m, cls.__lite_fields__[0], "set")
        assert getattr(m, cls.__lite_fields__[0]) == "set"
    # the errors the stdlib's generated __init__ raises, worded the same
    calls = [((), {}), ((*vals, "extra"), {}), (tuple(vals), {"nope": 1}), (tuple(vals[:1]), {cls.__lite_fields__[0]: 2})]
    for args, kw in calls:
        if not args and not kw and not _required(cls):
            continue
        with pytest.raises(TypeError) as e1:
            cls(*args, **kw)
        with pytest.raises(TypeError) as e2:
            twin(*args, **kw)
        assert _words(e1.value) == _words(e2.value), (args, kw)
    # replace, copies, pickling
    r = lite.replace(a, **{cls.__lite_fields__[-1]: "new"})
    assert repr(r) == repr(dataclasses.replace(t, **{cls.__lite_fields__[-1]: "new"}))
    with pytest.raises(TypeError):
        lite.replace(a, nope=1)
    assert copy.copy(a) == a and copy.deepcopy(a) == a
    assert pickle.loads(pickle.dumps(a)) == a


def _words(e: Exception) -> str:
    # the stdlib names its generated function `__create_fn__.<locals>.__init__` in some messages
    return re.sub(r"^\S*__init__\(\)", "__init__()", str(e))


def test_definition_errors_and_explicit_methods():
    with pytest.raises(TypeError, match="non-default argument 'b' follows default argument"):
        @lite.dataclass
        class Bad:
            a: int = 1
            b: int

    @lite.dataclass(frozen=True)
    class Own:
        x: int

        def __repr__(self) -> str:
            return "mine"

    assert repr(Own(1)) == "mine" and Own(1) == Own(1) and hash(Own(1)) == hash((1,))
    with pytest.raises(TypeError, match="cannot overwrite attribute __setattr__"):
        @lite.dataclass(frozen=True)
        class Sets:
            x: int

            def __setattr__(self, k, v):
                pass


def test_digest_is_hashlib_s():
    import hashlib

    from healer import digest

    for data in (b"", b"abc", bytes(range(256)) * 500):
        assert digest.sha1(data).hexdigest() == hashlib.sha1(data).hexdigest()
        assert digest.sha256(data).hexdigest() == hashlib.sha256(data).hexdigest()
        h = digest.sha1(b"blob %d\0" % len(data))
        h.update(data)
        assert h.digest() == hashlib.sha1(b"blob %d\0" % len(data) + data).digest()
