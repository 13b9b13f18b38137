"""The repair agent's sandbox: a container with no network, a read-only root, one
writable scratch folder, and the MCP server as its only line to the world.

Policy: `repair_agent.agent.sandbox: docker`. The agent runs in a container of the
offline `healer-python` image (healer/containers/images.py) with:
  - `network_mode="none"`: only a loopback with nothing behind it;
  - `read_only=True`, `ipc_mode="none"` (no /dev/shm), every capability dropped,
    `no-new-privileges`, a pids limit, and an unprivileged user (nobody when the host
    runs as root), so the scratch folder, bind-mounted read-write at its own path, is
    the only place it can write; the host's Python and healer are mounted read-only;
  - its stdin/stdout attached to the MCP server, which runs on the HOST (it needs the
    fleet's store, which the container never sees). The relay copies bytes between the
    container's attach stream and the server's pipes; nothing else is reachable.

Inside, the agent finds `HEALER_MCP_STDIO=inherit`: instead of spawning `healer mcp
serve` itself (it could not: no store, no write access), it speaks MCP over its own
stdin/stdout. `inherited_stdio()` gives an MCP client those streams:
    async with sandbox.inherited_stdio() as (read, write):
        async with ClientSession(read, write) as session: ...

The deadline kills the container (the whole PID namespace) and then the server's tree.
"""

from __future__ import annotations

import contextlib
import os
import socket
import struct
import subprocess
import threading
from collections.abc import Mapping, Sequence
from pathlib import Path

import anyio
import docker.errors
import mcp_types as types
from mcp.shared._context_streams import create_context_streams
from mcp.shared.message import SessionMessage

from healer import procs
from healer.clock import Clock, system
from healer.containers import images
from healer.containers.client import connect
from healer.containers.run import init_argv, signal_exit
from healer.errors import HealerError

ENV_STDIO = "HEALER_MCP_STDIO"  # "inherit": the agent's own stdin/stdout are the MCP transport
NOBODY = 65534


@contextlib.asynccontextmanager
async def inherited_stdio():
    """(read, write) MCP streams over this process's own stdin/stdout (the relay's far end).

    MCP over stdio is newline-delimited JSON-RPC both ways, as in the SDK's stdio_server;
    this one reads stdin without a blocking thread, so leaving the context does not wait
    for an EOF that only comes when the container exits (tini holds the pipe open)."""
    fd_in, fd_out = os.dup(0), os.dup(1)
    os.set_blocking(fd_in, False)
    read_writer, read_stream = create_context_streams[SessionMessage | Exception](0)
    write_stream, write_reader = create_context_streams[SessionMessage](0)

    async def reader():
        buf = b""
        async with read_writer:
            while True:
                await anyio.wait_readable(fd_in)
                try:
                    chunk = os.read(fd_in, 65536)
                except BlockingIOError:
                    continue
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    line, buf = buf.split(b"\n", 1)
                    if not line.strip():
                        continue
                    try:
                        msg = types.jsonrpc_message_adapter.validate_json(line, by_name=False)
                    except Exception as exc:  # noqa: BLE001 - handed to the session, as the SDK does
                        await read_writer.send(exc)
                        continue
                    await read_writer.send(SessionMessage(msg))

    async def writer():
        async with write_reader:
            async for sm in write_reader:
                data = (sm.message.model_dump_json(by_alias=True, exclude_unset=True) + "\n").encode()
                await anyio.to_thread.run_sync(_write_all, fd_out, data)

    try:
        async with anyio.create_task_group() as tg:
            tg.start_soon(reader)
            tg.start_soon(writer)
            try:
                yield read_stream, write_stream
            finally:
                tg.cancel_scope.cancel()
    finally:
        os.close(fd_in)
        os.close(fd_out)


def _write_all(fd: int, data: bytes) -> None:
    while data:
        n = os.write(fd, data)
        data = data[n:]


def sandboxed() -> bool:
    return os.environ.get(ENV_STDIO) == "inherit"


def _user_for(scratch: Path) -> str:
    if os.getuid() == 0:
        os.chown(scratch, NOBODY, NOBODY)  # root in the container could write to /dev; nobody cannot
        return f"{NOBODY}:{NOBODY}"
    return f"{os.getuid()}:{os.getgid()}"


def _pump_out(sock: socket.socket, to_server, stdout, stderr) -> None:
    """Demultiplex the attach stream (8-byte frame headers: stream, 0,0,0, size)."""
    buf = b""
    try:
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                break
            buf += chunk
            while len(buf) >= 8:
                kind, size = struct.unpack(">BxxxL", buf[:8])
                if len(buf) < 8 + size:
                    break
                data, buf = buf[8:8 + size], buf[8 + size:]
                target = stderr if kind == 2 else (to_server if to_server is not None else stdout)
                if target is None:
                    continue
                try:
                    target.write(data)
                    target.flush()
                except (BrokenPipeError, ValueError, OSError):
                    if target is to_server:
                        to_server = None  # server gone: keep draining so the container is never blocked
    except OSError:
        pass
    finally:
        if to_server is not None:
            with contextlib.suppress(OSError, ValueError):
                to_server.close()  # EOF for the server: the client is gone


def _pump_in(from_server, sock: socket.socket) -> None:
    try:
        while True:
            data = from_server.read1(65536) if hasattr(from_server, "read1") else from_server.read(65536)
            if not data:
                break
            sock.sendall(data)
    except OSError:
        pass
    finally:
        with contextlib.suppress(OSError):
            sock.shutdown(socket.SHUT_WR)  # EOF on the agent's stdin


def run(argv: Sequence[str], *, scratch: str | Path, timeout: float, grace: float = 2.0,
        server_argv: Sequence[str] | None = None, server_cwd: str | Path | None = None,
        server_env: Mapping[str, str] | None = None, env: Mapping[str, str] | None = None,
        stdout=None, stderr=None, server_stderr=None, image: str = "healer-python",
        readonly: Sequence[str | Path] = (),
        labels: Mapping[str, str] | None = None, clock: Clock | None = None, client=None,
        poll: float = 0.05) -> procs.Completed:
    """Run `argv` in the sandbox until it exits or `timeout`; same result shape as `procs.run`.

    `stdout`/`stderr`: binary files for the agent's output (stdout only when no server is
    attached: with a server, stdout IS the MCP channel). `readonly`: more host folders the
    agent may read (mounted read-only at the same path)."""
    clock = clock or system()
    client = client or connect()
    images.ensure(client, image)
    scratch = Path(scratch).resolve()
    scratch.mkdir(parents=True, exist_ok=True)
    start = clock.monotonic()
    volumes = dict(images.python_mounts())
    for p in readonly:  # e.g. the run folder holding the prompt and the MCP config; scratch may sit inside
        rp = str(Path(p).resolve())
        volumes[rp] = {"bind": rp, "mode": "ro"}
    volumes[str(scratch)] = {"bind": str(scratch), "mode": "rw"}
    cenv = {**images.python_path_env(), "HOME": str(scratch), "TMPDIR": str(scratch), "HEALER_SANDBOX": "1"}
    cenv.update(env or {})
    cenv.pop("HEALER_TREE", None)
    if server_argv:
        cenv[ENV_STDIO] = "inherit"
    all_labels = {"healer.kind": "repair-sandbox", **(labels or {})}

    try:
        container = client.containers.create(
            image, init_argv(argv), working_dir=str(scratch), volumes=volumes, environment=cenv,
            network_mode="none", read_only=True, ipc_mode="none", cap_drop=["ALL"],
            security_opt=["no-new-privileges"], pids_limit=256, user=_user_for(scratch),
            labels=all_labels, stdin_open=bool(server_argv), tty=False, detach=True)
    except docker.errors.APIError as e:
        raise HealerError(f"repair sandbox: cannot create the container from {image}: {e.explanation or e}") from e

    server = tree = None
    threads: list[threading.Thread] = []
    sock = None
    try:
        if server_argv:
            server, tree = procs.spawn(list(server_argv), cwd=server_cwd or scratch, env=server_env,
                                       stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=server_stderr)
            raw = client.api.attach_socket(container.id, params={"stdin": 1, "stdout": 1, "stderr": 1, "stream": 1})
            sock = getattr(raw, "_sock", raw)
            sock.settimeout(None)
            threads = [threading.Thread(target=_pump_out, args=(sock, server.stdin, None, stderr), daemon=True),
                       threading.Thread(target=_pump_in, args=(server.stdout, sock), daemon=True)]
            for t in threads:
                t.start()
        try:
            container.start()
        except docker.errors.APIError as e:  # e.g. the agent's program does not exist inside
            raise HealerError(f"repair sandbox: cannot start {list(argv)[:3]} in {image}: {e.explanation or e}") from e
        deadline = start + timeout
        timed_out = False
        code = None
        while True:
            container.reload()
            if container.status in ("exited", "dead"):
                code = signal_exit(container.attrs["State"].get("ExitCode"))
                break
            if clock.monotonic() >= deadline:
                timed_out = True
                with contextlib.suppress(docker.errors.APIError):
                    container.stop(timeout=max(0, int(grace)))
                container.reload()
                break
            clock.sleep(poll)
        for t in threads[:1]:
            t.join(timeout=5)
        if not server_argv:  # with a server, stderr was relayed live and stdout was the MCP channel
            _copy_logs(client, container.id, stdout, stderr)
        if server is not None:  # its stdin is closed now: let it finish its audit trail before any signal
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=max(grace, 2.0))
        killed = tree.kill(min(grace, 2.0), clock) if tree is not None else []
        return procs.Completed(None if timed_out else code, timed_out, killed, clock.monotonic() - start)
    finally:
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.close()
        if tree is not None:
            tree.kill(0.5, clock)
        if server is not None:
            with contextlib.suppress(subprocess.TimeoutExpired):
                server.wait(timeout=1)
        with contextlib.suppress(docker.errors.APIError):
            container.remove(force=True)


def _copy_logs(client, cid: str, stdout, stderr) -> None:
    if stdout is not None:
        stdout.write(client.api.logs(cid, stdout=True, stderr=False))
        stdout.flush()
    if stderr is not None:
        stderr.write(client.api.logs(cid, stdout=False, stderr=True))
        stderr.flush()
