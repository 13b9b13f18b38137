"""The operator console (`healer console`, `healer up --console-port`): the fleet in a browser, live, steerable.

Imperative shell around pure views (docs/console.md):

    views.py     pure: records in, page data out (board, ticket, agents, supervisor, pages, cost)
    render.py    page data -> HTML, every value escaped (titles, agent output and reasons are attacker-written)
    steer.py     the operator's actions, through the executor's one path (healer/remedy/actions.py)
    live.py      server-sent events: the store's new events by cursor, an agent's log tail
    gamedays.py  this fleet's game-day reports, and a shipped `--root` game day started as a child
    security.py  token, CSRF double-submit, headers (a strict Content-Security-Policy), bind refusal
    app.py       the Starlette routes;  serve.py  uvicorn in a thread, on 127.0.0.1 by default
"""
