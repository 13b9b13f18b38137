"""Validated policies remembered by content, so `healer loop run` (launched once per ticket) does not
pay for YAML and pydantic each time it starts with a policy it has seen before.

The key is a hash of the schema's own source (this package, healer/durations.py, pydantic's version
file) and of the policy file's bytes: a change to either is a miss, and a miss validates as before
(same errors, same exit codes) and then remembers. A hit gives a `Frozen` view: read-only attribute
access over the values pydantic produced, and `model_dump(mode=...)` as the model would answer.
Nothing is ever decided from the cache that pydantic did not decide first.

The file is `$HEALER_CACHE_DIR/policies.json` (default `$XDG_CACHE_HOME/healer`, else
`~/.cache/healer`): at most MAX_ENTRIES policies, the oldest dropped, replaced atomically; an
unreadable or malformed file is a miss. A sandboxed agent cannot write it (healer/sandbox.py binds
the folder read-only even when a policy makes ~/.cache writable); an unsandboxed agent can write
anything the user can, healer's own code included, so the cache adds nothing to what it could do.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sys
from pathlib import Path
from typing import Any

from healer import digest
from healer.errors import InvalidInput

MAX_ENTRIES = 16
MAX_BYTES = 1_000_000  # healer/policy/yamlpos.py's cap: a bigger file is never cached (load_policy refuses it)
FORMAT = 1
_MODEL = "__model__"  # marks a nested model in the stored python values (dict fields stay dicts)


def cache_dir() -> Path:
    explicit = os.environ.get("HEALER_CACHE_DIR")
    if explicit:
        return Path(explicit)
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "healer"


def _schema_sources() -> list[Path]:
    here = os.path.dirname(os.path.realpath(__file__))
    # listdir and plain joins, not glob and find_spec: this runs at every `healer loop run` (half a millisecond less)
    files = [Path(here, n) for n in sorted(os.listdir(here)) if n.endswith(".py")]
    files.append(Path(os.path.dirname(here), "durations.py"))
    # the action specs give the schema its action names and the default rate limits (healer/actions/)
    acts = os.path.join(os.path.dirname(here), "actions")
    files += [Path(acts, n) for n in sorted(os.listdir(acts)) if n.endswith(".py")]
    pkg = _pydantic_dir()
    if pkg is not None:
        files.append(Path(pkg, "version.py"))
    return files


def _pydantic_dir() -> str | None:
    """The folder `import pydantic` loads: the first sys.path entry holding the package, as the path finder
    looks; the import system's own answer when none does (pydantic found some other way)."""
    for d in sys.path:
        p = os.path.join(d or os.getcwd(), "pydantic")
        if os.path.isfile(os.path.join(p, "__init__.py")):
            return p
    try:
        spec = importlib.util.find_spec("pydantic")
    except (ImportError, ValueError):
        return None
    return os.path.dirname(spec.origin) if spec is not None and spec.origin else None


def key_for(raw: bytes | None) -> str:
    h = digest.sha256(f"healer-policy-cache-{FORMAT}\0".encode())
    for f in _schema_sources():
        try:
            h.update(f.name.encode() + b"\0" + f.read_bytes() + b"\0")
        except OSError:
            h.update(f.name.encode() + b"\0missing\0")
    reg = sys.modules.get("healer.actions")
    if reg is not None and reg.names() != reg.BUILTIN:
        # an action registered at run time (a plugin, a test's toy) changes the schema too; the built-in ones are
        # the files above, so a process that never loaded the registry computes the same key
        h.update(repr([(s.name, s.rate_limit) for s in reg.specs()]).encode())
    h.update(b"<default>" if raw is None else b"file\0" + raw)
    return h.hexdigest()


class Frozen:
    """Read-only attribute view of a validated model's values (see the module doc)."""

    __slots__ = ("_py", "_js")

    def __init__(self, py: dict, js: dict) -> None:
        object.__setattr__(self, "_py", py)
        object.__setattr__(self, "_js", js)

    def __getattr__(self, name: str) -> Any:
        try:
            v = self._py[name]
        except KeyError:
            raise AttributeError(name) from None
        return _view(v, self._js[name])

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"a cached policy is read-only ({name})")

    def model_copy(self, *, update: dict | None = None) -> Frozen:
        """A copy with top-level fields replaced by plain values (lists, strings, numbers), as pydantic's
        model_copy(update=...) does for the models it stands in for (the loop adds a CLI's endpoint to its
        allow-list this way)."""
        py, js = dict(self._py), dict(self._js)
        for k, v in (update or {}).items():
            if k not in py:
                raise AttributeError(k)
            py[k], js[k] = v, json.loads(json.dumps(v))
        return Frozen(py, js)

    def model_dump(self, mode: str = "python") -> dict:  # noqa: ARG002 - both modes dump the same here
        # the schema's python and json dumps are equal (durations serialize as strings in both;
        # tests/loop/test_policy_cache.py checks it), so one stored dump answers both
        return json.loads(json.dumps(self._js))

    def __repr__(self) -> str:
        return f"Frozen({self._js!r})"


def _view(py: Any, js: Any) -> Any:
    if isinstance(py, dict) and _MODEL in py:
        return Frozen(py[_MODEL], js)
    if isinstance(py, list):
        return [_view(p, j) for p, j in zip(py, js, strict=True)]
    if isinstance(py, dict):
        return {k: _view(v, js[k]) for k, v in py.items()}
    return py


def _values(obj: Any) -> Any:
    """A model's python-mode values as JSON data, nested models marked."""
    # only on a miss: pydantic is +173 ms of CPU per loop start (measured 2026-12-05, 15 paired starts, loaded machine)
    from pydantic import BaseModel  # lazy: pulls pydantic: 44 ms of `loop run`'s start

    if isinstance(obj, BaseModel):
        return {_MODEL: {name: _values(getattr(obj, name)) for name in type(obj).model_fields}}
    if isinstance(obj, (list, tuple)):
        return [_values(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): _values(v) for k, v in obj.items()}
    return obj


def _read(path: Path) -> dict:
    try:
        data = json.loads(path.read_text())
        return data if isinstance(data, dict) and data.get("format") == FORMAT else {}
    except (OSError, ValueError):
        return {}


SNAPSHOT = re.compile(r"[0-9a-f]{64}\.yaml")  # a dispatcher's policy snapshot (healer/fleet/dispatch_launch.py)


def load(path: str | Path | None, raw: bytes | None = None) -> Frozen:
    """The policy in `path` (None: the embedded default), validated once per content. `raw`: its bytes, already
    read by the caller (then the file is not opened again). A file named as a dispatcher's snapshot
    (`<sha256>.yaml`) must hash to its name: one changed since the dispatcher wrote it is refused (exit 65)."""
    if path is not None and raw is None:
        try:
            with open(path, "rb") as f:
                raw = f.read(MAX_BYTES + 1)
        except OSError:
            raw = None  # load_policy words the error
    if path is not None and raw is not None and SNAPSHOT.fullmatch(os.path.basename(path)) \
            and digest.sha256(raw).hexdigest() != os.path.basename(path)[:64]:
        raise InvalidInput(f"{path}: a policy snapshot that does not hash to its name: changed since the dispatcher "
                           "wrote it; refused")
    store = cache_dir() / "policies.json"
    usable = path is None or (raw is not None and len(raw) <= MAX_BYTES)
    key = key_for(raw) if usable else None
    entries = _read(store).get("entries", {}) if key else {}
    hit = entries.get(key) if key else None
    if isinstance(hit, dict) and "py" in hit and "js" in hit:
        try:
            return Frozen(hit["py"][_MODEL], hit["js"])
        except (KeyError, TypeError):
            pass
    from healer.policy.load import load_policy  # lazy: on a miss only: pulls pydantic, yaml: 128 ms of `loop run`'s start

    if raw is not None and len(raw) <= MAX_BYTES:
        from healer.policy.load import validate_text  # lazy: on a miss only: pulls pydantic, yaml: 128 ms of `loop run`'s start

        pol = validate_text(raw, str(path))  # the bytes checked above, never read again
    else:
        pol = load_policy(path)
    view = Frozen(_values(pol)[_MODEL], pol.model_dump(mode="json"))
    if key:
        _remember(store, key, {"py": {_MODEL: view._py}, "js": view._js})
    return view


def _remember(store: Path, key: str, entry: dict) -> None:
    try:
        store.parent.mkdir(parents=True, exist_ok=True)
        entries = _read(store).get("entries", {})
        entries.pop(key, None)
        entries[key] = entry  # newest last: the oldest go first
        while len(entries) > MAX_ENTRIES:
            entries.pop(next(iter(entries)))
        tmp = store.with_name(f".{store.name}.{os.getpid()}.tmp")
        try:
            tmp.write_text(json.dumps({"format": FORMAT, "entries": entries}, separators=(",", ":")))
            os.replace(tmp, store)
        finally:
            tmp.unlink(missing_ok=True)  # only left when the replace failed
    except OSError:
        pass  # a read-only home only costs the next start its validation
