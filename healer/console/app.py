"""The console's routes (Starlette). Pages are server-rendered from the views; the JSON API returns the same data;
/api/events and /api/agents/{id}/output are server-sent events; POST /steer/{name} runs one steering action."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

from sse_starlette.sse import EventSourceResponse
from starlette.applications import Starlette
from starlette.datastructures import MutableHeaders
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, JSONResponse, PlainTextResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from healer import lifecycle
from healer.console import gamedays, live, render, security, views
from healer.console.steer import STEERS, Steering
from healer.errors import NotFound
from healer.fleet.status import adopted_rows
from healer.store import keys

if TYPE_CHECKING:
    from healer.supervisor import Supervisor

STATIC = Path(__file__).resolve().parent / "static"
RECENT_AGENTS = 200  # the agents page: every running one, then the most recent ended ones
ACTED = 100  # the supervisor page: the newest intents, newest first
ACTED_WINDOW = 7 * 86400  # ...of the last week


class Console:
    """What every route reads: the fleet's root, its store (a connection of the console's own), policy, clock, a
    runtime (liveness, stopping), who the operator is, the game days it started."""

    def __init__(self, root: Path, store, policy, clock, access: security.Access, runtime=None) -> None:
        self.root, self.store, self.policy, self.clock, self.access = Path(root), store, policy, clock, access
        self.steering = Steering(self.root, store, policy, clock, runtime, access.actor)
        self.runner = gamedays.Runner(self.root, clock)
        self.stopping = threading.Event()
        self._planner: Supervisor | None = None
        self._plan_lock = threading.Lock()

    def plan(self):
        """What `healer plan` computes: a dry-run supervisor on a read-only connection of its own (built once)."""
        with self._plan_lock:
            if self._planner is None:
                from healer.store import open_store  # lazy: the same module the caller already loaded (0 ms)
                from healer.supervisor import Supervisor  # lazy: pulls the core and the snapshot: 350 ms, first visit only

                self._planner = Supervisor(self.root, self.policy, open_store(self.root, readonly=True), self.clock,
                                           runtime=self.steering.runtime, dry_run=True)
            return self._planner.plan()

    def close(self) -> None:
        self.stopping.set()
        self.runner.stop()
        if self._planner is not None:
            self._planner.store.close()


# -- the request's frame --------------------------------------------------------------

def _frame(c: Console, request: Request) -> dict[str, Any]:
    csrf = request.cookies.get(security.CSRF_COOKIE) or ""
    return {"root": str(c.root), "operator": c.access.operator, "read_only": c.access.read_only,
            "csrf": csrf or security.new_csrf(), "new_csrf": not csrf,
            "paused": bool(c.store.get_setting(keys.DISPATCH_PAUSED, False))}


def _html(c: Console, request: Request, title: str, body: str, *, ctx: dict[str, Any], active: str = "/",
          data: dict[str, str] | None = None, status: int = 200) -> HTMLResponse:
    resp = HTMLResponse(render.page(title, body, ctx=ctx, active=active, data=data), status_code=status)
    if ctx.get("new_csrf"):
        resp.set_cookie(security.CSRF_COOKIE, ctx["csrf"], httponly=True, samesite="strict", path="/")
    return resp


def _wants_json(request: Request) -> bool:
    return "application/json" in request.headers.get("accept", "")


# -- pages ----------------------------------------------------------------------------

def _int(v: str | None, default: int, lo: int = 0, hi: int = 10_000_000) -> int:
    try:
        return min(hi, max(lo, int(v))) if v is not None else default
    except ValueError:
        return default


def board(c: Console, request: Request) -> Response:
    qp = request.query_params
    state = qp.get("state") or None
    if state and state not in lifecycle.STATES:
        state = None
    data = views.board(c.store.tickets(), state=state, q=qp.get("q", "")[:200], offset=_int(qp.get("offset"), 0),
                       limit=_int(qp.get("limit"), views.BOARD_LIMIT, 1, 1000))
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, "board", render.board(data, ctx), ctx=ctx, active="/", data={"page": "board"})


def _ticket_data(c: Console, tid: str) -> dict[str, Any]:
    t = c.store.ticket(tid)
    attempts = c.store.attempts(tid)
    runs = sorted({a.run_id for a in attempts if a.run_id})
    run_events = [e for r in runs for e in c.store.events(subject=r, kinds=list(views.SPEND_KINDS))]
    return views.ticket_page(t, attempts=attempts, proposals=c.store.proposals(tid), comments=c.store.comments(tid),
                             events=c.store.events(subject=tid, kinds=["ticket.moved"]), run_events=run_events,
                             intents=c.store.intents(subject=tid), agents=c.store.agents(ticket_id=tid))


def ticket(c: Console, request: Request) -> Response:
    tid = request.path_params["tid"]
    try:
        data = _ticket_data(c, tid)
    except NotFound:
        return _missing(c, request, f"no ticket {tid!r}")
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, tid, render.ticket(data, ctx), ctx=ctx, data={"page": "ticket", "ticket": tid})


def _missing(c: Console, request: Request, text: str) -> Response:
    if _wants_json(request):
        return JSONResponse({"error": text}, status_code=404)
    ctx = _frame(c, request)
    return _html(c, request, "not found", render.message("not found", text), ctx=ctx, status=404)


def _agents_data(c: Console, agents: list) -> list[dict[str, Any]]:
    runs = {a.run_id for a in agents if a.run_id}
    evs = [e for r in sorted(runs) for e in c.store.events(subject=r, kinds=list(views.SPEND_KINDS))]
    return views.agents_page(agents, evs, c.clock.now())


def agents(c: Console, request: Request) -> Response:
    running = c.store.agents(states=["running"])
    ended = sorted((a for a in c.store.agents() if a.state != "running"), key=lambda a: a.started_at)[-RECENT_AGENTS:]
    data = _agents_data(c, running + ended)
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, "agents", render.agents(data, ctx), ctx=ctx, active="/agents", data={"page": "agents"})


def adopted(c: Console, request: Request) -> Response:
    data = adopted_rows(c.store, c.clock.now())
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, "adopted", render.adopted(data), ctx=ctx, active="/adopted", data={"page": "adopted"})


def agent(c: Console, request: Request) -> Response:
    aid = request.path_params["aid"]
    try:
        a = c.store.agent(aid)
    except NotFound:
        return _missing(c, request, f"no agent {aid!r}")
    [data] = _agents_data(c, [a])
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, aid, render.agent(data, ctx), ctx=ctx, active="/agents", data={"page": "agent", "agent": aid})


def _no_agent(c: Console, aid: str) -> Response | None:
    """The 404 of an agent the store does not know (its log is never looked for then)."""
    try:
        c.store.agent(aid)
    except NotFound:
        return PlainTextResponse(f"no agent {aid!r}\n", status_code=404)
    return None


def agent_log(c: Console, request: Request) -> Response:
    aid = request.path_params["aid"]
    if (missing := _no_agent(c, aid)) is not None:
        return missing
    p = live.agent_log(c.root, aid)
    return PlainTextResponse(live.read_tail(p) if p else "", headers={"Content-Disposition": "inline"})


def supervisor(c: Console, request: Request) -> Response:
    plan, why = None, ""
    try:
        plan = views.plan_view(c.plan())
    except Exception as e:  # noqa: BLE001 - the page shows why there is no plan (a store away, a bad policy) in one line
        why = f"{type(e).__name__}: {e}"
    recent = c.store.intents(since=c.clock.now() - ACTED_WINDOW)[-ACTED:]  # the store keeps the oldest first
    acted = [views.intent_row(i) for i in reversed(recent)]
    pages = views.pages(c.store.events(kinds=list(views.PAGE_KINDS)))
    if _wants_json(request):
        return Response(json.dumps({"plan": plan, "plan_error": why, "acted": acted, "pages": pages}, default=str),
                        media_type="application/json")
    ctx = _frame(c, request)
    return _html(c, request, "supervisor", render.supervisor(plan, why, acted, pages, ctx), ctx=ctx, active="/supervisor",
                 data={"page": "supervisor"})


def cost_data(c: Console) -> dict[str, Any]:
    run_ticket = {a.run_id: a.ticket_id for a in c.store.agents() if a.run_id and a.ticket_id}
    return views.cost(c.store.events(kinds=list(views.SPEND_KINDS)), c.store.events(kinds=["loop.started"]), run_ticket)


def cost(c: Console, request: Request) -> Response:
    data = cost_data(c)
    if _wants_json(request):
        return JSONResponse(data)
    ctx = _frame(c, request)
    return _html(c, request, "cost", render.cost(data, ctx), ctx=ctx, active="/cost", data={"page": "cost"})


def gameday_list(c: Console, request: Request) -> Response:
    reps = gamedays.reports(c.root)
    names = sorted(gamedays.shipped_root_scenarios())
    running = [{k: v for k, v in r.items() if k != "argv"} for r in c.runner.started]
    if _wants_json(request):
        return JSONResponse({"reports": reps, "scenarios": names, "started": running})
    ctx = _frame(c, request)
    return _html(c, request, "game days", render.gamedays(reps, names, running, ctx), ctx=ctx, active="/gamedays",
                 data={"page": "gamedays"})


def gameday_file(c: Console, request: Request) -> Response:
    p = gamedays.report_file(c.root, request.path_params["name"], request.path_params["file"])
    if p is None:
        return PlainTextResponse("no such report file\n", status_code=404)
    media = {".html": "text/html", ".md": "text/plain", ".json": "application/json", ".xml": "text/plain", ".log": "text/plain"}
    resp = FileResponse(p, media_type=media.get(p.suffix, "text/plain"))
    if p.suffix == ".html":
        resp.headers["Content-Security-Policy"] = security.REPORT_CSP  # the report's own inline style, no script
    return resp


# -- live -----------------------------------------------------------------------------

def events_stream(c: Console, request: Request) -> Response:
    after = request.headers.get("last-event-id") or request.query_params.get("after")
    cursor = _int(after, -1) if after else None
    gen = live.fleet_events(c.store, cursor if cursor is not None and cursor >= 0 else None, c.stopping,
                            all_kinds=request.query_params.get("all") == "1")
    return EventSourceResponse(gen, ping=15)


def agent_stream(c: Console, request: Request) -> Response:
    aid = request.path_params["aid"]
    if (missing := _no_agent(c, aid)) is not None:
        return missing
    p = live.agent_log(c.root, aid)
    if p is None:
        return PlainTextResponse("no log\n", status_code=404)

    def ended() -> bool:
        try:
            return c.store.agent(aid).state != "running"
        except NotFound:
            return True

    return EventSourceResponse(live.tail(p, ended, c.stopping), ping=15)


# -- steering and login ---------------------------------------------------------------

async def steer(c: Console, request: Request) -> Response:
    if c.access.read_only:
        return PlainTextResponse("console: read-only (--read-only): no steering\n", status_code=403)
    form = await request.form()
    if not security.same(str(form.get("csrf") or ""), request.cookies.get(security.CSRF_COOKIE)):
        return PlainTextResponse("console: CSRF token missing or wrong: reload the page and try again\n", status_code=403)
    origin = request.headers.get("origin")
    if origin and origin not in (f"http://{request.headers.get('host', '')}", f"https://{request.headers.get('host', '')}"):
        return PlainTextResponse("console: a request from another origin\n", status_code=403)
    name = request.path_params["name"]
    subject = str(form.get("subject") or "")
    import anyio  # lazy: already loaded by Starlette (0 ms); keeps the module's imports to the web stack

    if name == "gameday":
        try:
            row = c.runner.start(subject)
        except KeyError:
            return PlainTextResponse(f"console: no shipped --root game day {subject[:80]!r}\n", status_code=404)
        await anyio.to_thread.run_sync(lambda: c.store.append("console.gameday_started", row["name"], {
            "scenario": subject, "pid": row["pid"], "actor": c.access.actor}))
        out = {"action": "gameday", "subject": subject, "status": "started", "reason": f"report in .healer/gamedays/{row['name']}",
               "actor": c.access.actor}
        back = "/gamedays"
    elif name in STEERS:
        out = await anyio.to_thread.run_sync(lambda: c.steering.run(name, subject))
        back = _back(name, subject)
    else:
        return PlainTextResponse(f"console: no steering action {name[:40]!r}\n", status_code=404)
    if _wants_json(request):
        return JSONResponse(out)
    ctx = _frame(c, request)
    return _html(c, request, f"{name} {subject}", render.steered(out, back, ctx), ctx=ctx,
                 status=200 if out["status"] in ("done", "started") else 409)


def _back(name: str, subject: str) -> str:
    if name in ("requeue", "escalate", "release"):
        return f"/tickets/{quote(subject, safe='')}"
    if name == "stop":
        return f"/agents/{quote(subject, safe='')}"
    if name == "ack":
        return "/supervisor"
    return "/"


async def login(c: Console, request: Request) -> Response:
    """POST the token once; an HttpOnly SameSite=Strict cookie carries it from then on."""
    if request.method == "POST":
        form = await request.form()
        if c.access.token and security.same(str(form.get("token") or ""), c.access.token):
            resp = RedirectResponse("/", status_code=303)
            resp.set_cookie(security.TOKEN_COOKIE, c.access.token, httponly=True, samesite="strict", path="/")
            return resp
        return HTMLResponse(_login_page("wrong token"), status_code=401)
    return HTMLResponse(_login_page(""))


def _login_page(why: str) -> str:
    return ('<!doctype html><html lang="en"><head><meta charset="utf-8"><title>healer console: token</title>'
            '<link rel="stylesheet" href="/static/console.css"></head><body><main><h1>healer console</h1>'
            f'<p>{render.e(why)}</p><form method="post" action="/login"><input type="password" name="token" '
            'placeholder="console token" autofocus><button type="submit">enter</button></form></main></body></html>')


# -- the app --------------------------------------------------------------------------

class Guard:
    """ASGI middleware: the token (when one is set) on every request but /login and the static files; the security
    headers on every response (docs/console.md "Security")."""

    def __init__(self, app, access: security.Access) -> None:
        self.app, self.access = app, access

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        if self.access.token and not (path == "/login" or path.startswith("/static/")):
            req = Request(scope)
            given = security.bearer(req.headers.get("authorization")) or req.cookies.get(security.TOKEN_COOKIE)
            if not security.same(given, self.access.token):
                if "text/html" in req.headers.get("accept", ""):
                    resp: Response = RedirectResponse("/login", status_code=303)
                else:
                    resp = PlainTextResponse("console: a token is required (Authorization: Bearer TOKEN)\n", status_code=401)
                return await self._headers(resp)(scope, receive, send)

        async def send_with_headers(message) -> None:
            if message["type"] == "http.response.start":
                h = MutableHeaders(scope=message)
                for k, v in security.HEADERS.items():
                    if k not in h:
                        h[k] = v
            await send(message)

        await self.app(scope, receive, send_with_headers)

    def _headers(self, resp: Response) -> Response:
        for k, v in security.HEADERS.items():
            resp.headers[k] = v
        return resp


def build(c: Console) -> Starlette:
    def bind(fn):
        import inspect  # lazy: stdlib, loaded by Starlette already (0 ms)

        if inspect.iscoroutinefunction(fn):
            async def handler(request: Request) -> Response:
                return await fn(c, request)
        else:
            def handler(request: Request) -> Response:  # type: ignore[misc]
                return fn(c, request)
        return handler

    routes = [
        Route("/", bind(board)), Route("/tickets/{tid}", bind(ticket)), Route("/agents", bind(agents)), Route("/adopted", bind(adopted)),
        Route("/agents/{aid}", bind(agent)), Route("/agents/{aid}/log", bind(agent_log)), Route("/supervisor", bind(supervisor)),
        Route("/cost", bind(cost)), Route("/gamedays", bind(gameday_list)), Route("/gamedays/{name}/{file}", bind(gameday_file)),
        Route("/api/events", bind(events_stream)), Route("/api/agents/{aid}/output", bind(agent_stream)),
        Route("/steer/{name}", bind(steer), methods=["POST"]), Route("/login", bind(login), methods=["GET", "POST"]),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]
    app = Starlette(routes=routes)
    app.add_middleware(Guard, access=c.access)
    return app
