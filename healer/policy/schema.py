"""The policy schema (docs/spine.md "Policies") with its field defaults (policies/default.yaml says each).

Every number here is a default, overridable per policy. Unknown keys are errors.
Durations are written as strings (`90s`, `30m`, `1h30m`) and held as seconds.
`policies/schema.json` is generated from these models (`healer policy schema`).
"""

from __future__ import annotations

import re
from typing import Annotated, Literal, get_args

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    model_validator,
)

from healer import actions, endpoints
from healer.errors import InvalidInput
from healer.policy.adopt import Adopt, AdoptRule  # noqa: F401 - the `adopt:` section (docs/adopt.md)

# the units are one module of their own (healer/policy/adopt.py uses them too); re-exported for the many callers
from healer.policy.units import WRITTEN, Duration, NonNegInt, PosInt, _duration, _not_bool, written  # noqa: F401

HARD_MAX_ITERATIONS = 1000  # no policy may raise absolute_max above this



def _known_action(v: str) -> str:
    if v not in actions.ACTIONS:
        raise ValueError(f"expected a remediation action ({', '.join(actions.names())}), got {v!r}")
    return v


class _ActionsEnum:
    """The JSON schema of an action name: the registered names, read when the schema is made."""

    def __get_pydantic_json_schema__(self, core_schema, handler):
        return {"enum": list(actions.names()), "type": "string"}


# the remediation whitelist (docs/supervisor.md): the only actions that exist, one spec each in healer/actions/
Action = Annotated[str, AfterValidator(_known_action), _ActionsEnum()]

ACTIONS = actions.ACTIONS  # live: an action registered after import is in it

# what the supervisor can find (docs/supervisor.md's table, then the sentinels)
FindingKind = Literal[
    "agent_dead",
    "agent_idle",
    "agent_stuck",
    "frozen_in_progress",
    "stale_label",
    "stale_block",
    "orphan_worktree",
    "unknown_file",
    "zombie_ticket",
    "wait_cycle",
    "same_commit_repush",
    "dispatch_frozen",
    "pool_saturated",
    "no_closes",
    "main_red",
    "supervisor_silent",
    "spend_rate",
    # adopted loops (docs/adopt.md): loops healer did not launch, judged from what it can observe
    "adopted_idle",
    "adopted_stuck",
    "adopted_cost",
    "adopted_iterations",
    "adopted_no_progress",
    "adopted_cycle",
    "adopted_procs",
    "adopted_memory",
    "adopted_same_failure",
    "adopted_gone",
]
FINDINGS: tuple[str, ...] = get_args(FindingKind)


class Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", validate_default=True)


class Stall(Strict):
    same_state: PosInt = Field(2, description="iterations with an unchanged state hash before 'stalled'")
    same_failure: PosInt = Field(3, description="iterations with the same failure signature before 'stalled'")
    duplicate_output: Literal["flag", "stop"] = Field("flag", description="an agent output seen before: flag it, or "
                                                                         "stop (only when its state was also seen before)")
    cycle_window: NonNegInt = Field(8, description="state hashes looked back at for a cycle: A-B-A-B, A-B-C-A-B-C ... "
                                                   "(periods up to half of it) stop the loop as stalled; 0: off")


class ModelPrice(Strict):
    input: Annotated[float, Field(ge=0), BeforeValidator(_not_bool)] = Field(description="USD per million input tokens")
    output: Annotated[float, Field(ge=0), BeforeValidator(_not_bool)] = Field(description="USD per million output tokens")
    cached_input: Annotated[float, Field(ge=0), BeforeValidator(_not_bool)] | None = Field(
        None, description="USD per million cached input (cache read) tokens; null: the input price")
    cache_write: Annotated[float, Field(ge=0), BeforeValidator(_not_bool)] | None = Field(
        None, description="USD per million cache-creation tokens (Anthropic); null: the input price")


class Memory(Strict):
    progress_lines: PosInt = Field(60, description="lines of progress.md given to the agent")
    gate_log_lines: PosInt = Field(80, description="lines of the previous gate log given to the agent")


class ProcLimits(Strict):
    # sized for the real CLIs with room to spare (policies/default.yaml says why), small enough that a fork bomb or a
    # memory hog of the agent's ends in its own cgroup, not the machine's (issue 39)
    pids: PosInt | None = Field(512, description="most processes (and threads) the agent or a gate may have at once, "
                                                 "through the run's cgroup (healer/cgroups.py); null: no limit")
    memory: PosInt | None = Field(4 << 30, description="bytes of memory the agent or a gate may use, through the run's "
                                                       "cgroup (4 GiB); null: no limit")


class Agent(Strict):
    preset: Literal["command", "claude", "codex"] = "command"
    command: list[str] = Field(default_factory=list, description="argv; {prompt_file} {workdir} {iteration}; never a shell")
    model: str | None = None
    max_turns: PosInt | None = None
    extra_args: list[str] = Field(default_factory=list)
    tools: list[str] | None = Field(default_factory=lambda: ["Bash", "Edit", "Write", "Read", "Glob", "Grep"],
                                    description="what the claude preset's agent may use (its --allowedTools; -p mode "
                                                "refuses Bash without it); null: the CLI's own default. codex has no "
                                                "per-tool list: healer's sandbox replaces its own (docs/agents.md)")
    after_result_grace: Duration = Field(written("5s"), description="once the CLI printed its final event (claude: result; "
                                         "codex: turn.completed/turn.failed; command: either), how long it has to exit "
                                         "by itself; then it and whatever it left running (a background shell) are "
                                         "ended (loop.agent_ended_after_result) and the gates run as after any end")

    @model_validator(mode="after")
    def _command_needed(self) -> Agent:
        if self.preset == "command" and not self.command:
            # allowed at schema level: `--agent-cmd` on the CLI may supply it
            pass
        return self


class Gate(Strict):
    name: str = Field(min_length=1)
    run: list[str] = Field(min_length=1, description="argv, run in the working tree; exit 0 = pass")
    timeout: Duration = written("10m")
    report: Literal["auto", "exit_code"] = Field(
        "auto", description="auto: a pytest gate (pytest, python -m pytest) is run with the base's config and "
                            "judged by its JUnit report (every protected test it selects ran and passed, none "
                            "failed, at least one passed; docs/security.md); exit_code: its exit code alone (weaker: "
                            "the tree can steer it). Any gate's files (what its argv names, make's Makefile, "
                            "pytest's config and conftest.py files outside protected_paths) must be the base's")


class Loop(Strict):
    max_iterations: PosInt = Field(12, description="hard cap on iterations, never above absolute_max")
    absolute_max: PosInt = Field(25, le=HARD_MAX_ITERATIONS, description="ceiling for max_iterations")
    iteration_timeout: Duration = Field(written("20m"), description="deadline around the whole iteration")
    kill_grace: Duration = Field(written("10s"), description="SIGTERM -> SIGKILL grace")
    run_timeout: Duration | None = Field(None, description="wall-clock cap on the whole run (exit 2)")
    max_iterations_per_day: PosInt = Field(100, description="daily cap across runs of this working tree")
    stall: Stall = Field(default_factory=Stall)
    memory: Memory = Field(default_factory=Memory)
    checkpoint_every: PosInt = 1
    protected_paths: list[str] = Field(default_factory=lambda: ["tests/"])
    instruction_files: list[str] = Field(default_factory=list, description="more agent-instruction and tool-config "
                                         "files (names at any depth, folders ending in /) on top of healer's list "
                                         "(healer/guarded.py INSTRUCTION_FILES: .claude/, CLAUDE.md, AGENTS.md, .mcp.json, "
                                         ".codex/, .cursor/, .envrc, .vscode/, .github/workflows/, ...): what the agent "
                                         "writes there is quarantined after each step and never committed "
                                         "(loop.instruction_files_quarantined)")
    instruction_files_allow: list[str] = Field(default_factory=list, description="entries of that list (or paths "
                                               "under them) the agent may write and the loop commits, e.g. [AGENTS.md]")
    max_diff_lines: PosInt = 400
    max_diff_bytes: PosInt = Field(4_000_000, description="bytes of changed files per iteration (binary files count by "
                                                           "size); above it the iteration is rolled back like for lines")
    sandbox: Literal["auto", "bwrap", "container", "none"] = Field(
        "auto", description="how the agent and the gates run: bwrap (bubblewrap: read-only filesystem except the "
                            "worktree, its branch in git, a private temp dir and sandbox_writable), container (the "
                            "same writable set in a Docker container of sandbox_image: read-only root, no "
                            "capabilities, no network by default), none (unconfined; writes outside the worktree are "
                            "reported as loop.outside_write), auto (bwrap when it works here, else none with one "
                            "warning). A sandbox that fails to start ends the loop: exit 69, loop.sandbox_failed")
    sandbox_network: bool | None = Field(None, description="network inside the sandbox; null: off (bwrap: a network "
                                                           "namespace of its own, container: none) but for "
                                                           "sandbox_network_allow, where the claude/codex presets' model "
                                                           "endpoint is added by itself; true: the host's network")
    sandbox_network_allow: list[str] = Field(default_factory=list, description="bwrap: the host:port endpoints the "
                                             "sandboxed programs may reach (e.g. api.anthropic.com:443, "
                                             "127.0.0.1:8080); with it the network is off but for these (null "
                                             "sandbox_network means false; true is refused). A name answers inside "
                                             "on a loopback alias, a port below 1024 on port + 10000")
    sandbox_unix_sockets: bool = Field(False, description="bwrap: the programs may make Unix sockets (connect to "
                                                          "the host's: Docker, PostgreSQL, D-Bus); false: "
                                                          "socket(AF_UNIX) refused by a seccomp filter "
                                                          "(socketpair still works)")
    sandbox_pid_namespace: bool = Field(True, description="bwrap: the agent and gates in a pid namespace of their own "
                                                           "(they cannot see or signal the loop runner, nor reach the "
                                                           "host through /proc magic links; every process ends with "
                                                           "bwrap); pids they report are the namespace's. false is "
                                                           "honoured for a non-root runner only (container: always)")
    limits: ProcLimits = Field(default_factory=ProcLimits, description="the run's cgroup limits, where the controllers "
                                                                         "exist and are writable (root; else one warning)")
    sandbox_image: str = Field("healer-python", description="the image of sandbox: container (healer-python: built "
                                                            "offline, the host's /usr and Python mounted read-only)")
    sandbox_writable: list[str] = Field(default_factory=list, description="more paths the sandboxed agent may write: "
                                                                          "folders or files (a missing name with a "
                                                                          "suffix is made an empty file, one ending "
                                                                          "in / a folder); ~ is expanded. The "
                                                                          "claude/codex presets need none: each run "
                                                                          "has its own config home")
    env_pass: list[str] | None = Field(None, description="the environment variables the agent and the gates get "
                                                         "(names or globs: [ANTHROPIC_API_KEY, 'AWS_*']) besides a "
                                                         "base set (PATH, HOME, locale, terminal, temp dir, user) and "
                                                         "the loop's HEALER_* run variables; null: all of healer's but "
                                                         "its store's credentials (HEALER_STORE_URL, PGPASSWORD) and "
                                                         "HEALER_FAILPOINTS")
    kill_switch: str = ".healer/STOP"
    spend_cap_usd: Annotated[float, Field(gt=0), BeforeValidator(_not_bool)] | None = Field(
        5.0, description="the run's spend cap, counted per API turn as the agent streams (killed iterations "
                         "included): each iteration gets only what is left (claude: --max-budget-usd), and an agent "
                         "whose turn takes the run over it is stopped (loop.spend_cap_hit, exit 2)")
    prices: dict[str, ModelPrice] = Field(default_factory=dict, description="USD per million tokens by model name "
                                          "prefix (longest wins; '*' for any), over the built-in table of "
                                          "healer/loop/usage.py; prices the tokens a CLI reports without dollars")
    idle_timeout: Duration | None = Field(written("10m"), description="an agent that prints nothing (no byte on stdout or "
                                                             "stderr, no stream event) for this long is stopped like a "
                                                             "hung one (loop.agent_idle); null: off")
    output_cap: PosInt | None = Field(16 << 20, ge=64, description="bytes kept of each captured stream (the agent's "
                                      "stdout and stderr, each gate's log): the first half and the last half, a "
                                      "marker line saying how much was cut between (loop.output_truncated); the "
                                      "spend meter still reads all of it; null: kept whole")
    agent: Agent = Field(default_factory=Agent)
    gates: list[Gate] = Field(default_factory=list, description="cheapest first; exit codes decide, and for pytest "
                                                                "gates their report (Gate.report)")
    gate_config: list[str] = Field(default_factory=list, description="more files (relative to the tree) every gate "
                                   "takes from the base: a difference in the tree fails the gate, unrun (besides what "
                                   "its argv names, make's Makefile and pytest's config and conftest.py files)")

    @model_validator(mode="after")
    def _allow(self) -> Loop:
        if self.sandbox_network_allow:
            if self.sandbox_network is True:
                raise ValueError("sandbox_network: true reaches everything; an allow-list needs false or null "
                                 "@sandbox_network_allow")
            try:
                endpoints.parse_allow(self.sandbox_network_allow, "entry")
            except InvalidInput as e:
                raise ValueError(f"{e} @sandbox_network_allow") from None
        return self

    @model_validator(mode="after")
    def _caps(self) -> Loop:
        if self.max_iterations > self.absolute_max:
            raise ValueError(
                f"expected at most absolute_max ({self.absolute_max}, the maximum), "
                f"got {self.max_iterations} @max_iterations"
            )
        return self


class Retry(Strict):
    max_launches: PosInt = Field(5, description="launches per ticket, resumes included")
    backoff: list[Duration] = Field(default_factory=lambda: [written(d) for d in ("5m", "10m", "20m", "40m")])
    resume_same_state_limit: PosInt = 3
    rejected_proposal_replays: NonNegInt = 2
    session_ttl: Duration = written("24h")
    infra_backoff: list[Duration] = Field(
        default_factory=lambda: [written(d) for d in ("30s", "1m", "2m", "5m")],
        description="wait between retries of a ticket whose last attempts the infrastructure ended (store, disk, "
                    "sandbox, git lock, host event: healer/core/endings.py); such attempts count toward no budget")


class Health(Strict):
    agent_idle: Duration = written("30m")
    agent_stuck: Duration = written("90m")
    frozen_in_progress: Duration = written("10m")
    stale_labels: dict[str, Duration] = Field(default_factory=lambda: {"to-review": written("2h")})
    stale_block: Duration = Field(written("10m"), description="a blocked ticket nothing blocks any more (no open blocked_by, no "
                                                     "wait label, no rejected proposal) for this long is unblocked")
    orphan_worktree: Duration = written("30m")
    review_grace: Duration = Field(written("5m"), description="a ticket still in review whose proposal is merged (the merge "
                                                     "recorded, the move to done not yet: a store lost in between) is "
                                                     "left this long for the dispatcher to finish before it is judged "
                                                     "a zombie; longer than store.outage_tolerance")


class Sentinels(Strict):
    dispatch_frozen: Duration = written("1h")
    pool_saturated: Duration = written("45m")
    no_closes: Duration = written("90m")
    main_red: Duration = Field(written("0s"), description="alarm once main has been red this long")
    supervisor_silent: Duration = Field(written("5m"), description="no supervisor tick for this long")
    dispatcher_silent: Duration = Field(written("5m"), description="no dispatcher pass for this long and its process is gone: "
                                                          "dispatch is frozen whatever the pause says")
    cooldown: Duration = Field(written("4h"), description="one notification per key per window")
    spend_rate: Annotated[float, Field(gt=0), BeforeValidator(_not_bool)] | None = Field(
        50.0, description="alarm when the fleet's loops spent more than this many USD within spend_window "
                          "(counted per streamed API turn, killed iterations included); null: off")
    spend_window: Duration = Field(written("1h"), description="the window spend_rate is measured over")


class RateLimit(Strict):
    count: PosInt
    per: Duration


def _default_rates() -> dict[str, RateLimit]:
    return {s.name: RateLimit(count=s.rate_limit[0], per=written(s.rate_limit[1])) for s in actions.specs()}


class Remediation(Strict):
    allowed: list[Action] = Field(default_factory=lambda: list(actions.names()), description="the whitelist in force")
    max_actions_per_tick: PosInt = Field(20, description="blast radius of one tick")
    rate_limits: dict[Action, RateLimit] = Field(default_factory=_default_rates)
    quiet_period: Duration = Field(written("4h"), description="per-ticket remediation lease shared by rules, repair agent and humans")
    observe_only: bool = False


class RepairAgentCommand(Strict):
    preset: Literal["builtin", "claude", "codex", "command"] = "builtin"
    command: list[str] = Field(default_factory=list)
    max_turns: PosInt = 20
    sandbox: Literal["none", "docker"] = "none"


class RepairAgent(Strict):
    enabled: bool = True
    blocked_for: Duration = written("3h")
    min_signals: PosInt = 3
    quiet_period: Duration = written("4h")
    max_runs_per_day: PosInt = 2
    timeout: Duration = written("15m")
    max_tool_calls: PosInt = 20
    agent: RepairAgentCommand = Field(default_factory=RepairAgentCommand)


class Notifier(Strict):
    kind: Literal["log", "jsonl", "webhook", "command", "alertmanager"]
    path: str | None = None
    url: str | None = None
    secret_env: str | None = Field(None, description="environment variable holding the webhook secret")
    command: list[str] = Field(default_factory=list)
    retries: NonNegInt = Field(3, description="ignored since the outbox: a delivery is retried (backoff with jitter) until notify.expire")
    timeout: Duration = Field(written("10s"), description="per-try deadline for one delivery (webhook request, command run)")
    format: Literal["healer", "alertmanager_webhook", "alertmanager"] = Field(
        "healer", description="webhook body: healer's JSON (Slack-compatible `text`) or `alertmanager_webhook`, the payload "
                              "Alertmanager sends its own webhook receivers. `alertmanager` (before 0.34) is read as "
                              "`alertmanager_webhook`, except toward a URL ending in /api/v2/alerts, which gets what "
                              "Alertmanager's API takes (kind: alertmanager's PostableAlerts)")
    labels: dict[str, str] = Field(default_factory=dict, description="alertmanager: labels added to every alert (routing, "
                                   "e.g. {team: infra}); healer's own (alertname, key, subject, severity, source) win")
    generator_url: str | None = Field(None, description="alertmanager: the alerts' generatorURL (e.g. a dashboard)")

    @model_validator(mode="after")
    def _needs(self) -> Notifier:
        need = {"jsonl": "path", "webhook": "url", "alertmanager": "url"}.get(self.kind)
        if need and not getattr(self, need):
            raise ValueError(f"expected '{need}' for a {self.kind} notifier, got none @{need}")
        if self.kind == "command" and not self.command:
            raise ValueError("expected 'command' (an argv list) for a command notifier, got none @command")
        for name in self.labels:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", name):
                raise ValueError(f"expected a Prometheus label name ([A-Za-z_][A-Za-z0-9_]*), got {name!r} @labels")
        return self


def _default_notifiers() -> list[Notifier]:
    return [Notifier(kind="log"), Notifier(kind="jsonl", path=".healer/notifications.jsonl")]


class Notify(Strict):
    notifiers: list[Notifier] = Field(default_factory=_default_notifiers)
    expire: Duration = Field(written("24h"), description="a webhook/command notification still undelivered after this is dropped "
                                               "(event notify.expired)")


_ANSWERS = actions.ByFinding(FINDINGS)  # finding kind -> the actions that can mean anything for it (live)


class RuleLimits(Strict):
    max_per_hour: PosInt | None = None
    max_per_ticket: PosInt | None = None


class Rule(Strict):
    id: str = Field(min_length=1)
    when: FindingKind
    for_: Duration = Field(written("0s"), alias="for", description="debounce: the finding must persist this long")
    do: list[Action] = Field(min_length=1)
    limits: RuleLimits = Field(default_factory=RuleLimits)
    escalate_after: PosInt | None = Field(None, description="escalate after this many attempts on one subject")
    labels: list[str] = Field(default_factory=list, description="only for findings about a ticket carrying one of these "
                              "labels (for stale_label: one of the stale labels); other findings keep the rule without labels")

    model_config = ConfigDict(extra="forbid", populate_by_name=True, validate_default=True)

    @model_validator(mode="after")
    def _applicable(self) -> Rule:
        # one validation for a policy's `rules:` and a runbook's front matter (`healer runbook check`, issue 41): a step
        # that can mean nothing for `when` is refused, not skipped at run time
        ok = _ANSWERS[self.when]
        for i, a in enumerate(self.do):
            if a not in ok:
                raise ValueError(f"expected an action that applies to {self.when} ({', '.join(sorted(ok))}), got {a} @do.{i}")
        return self


class Fleet(Strict):
    pool_size: PosInt = Field(4, description="live agents at most")
    main_branch: str = "main"
    shared_remote: str | None = Field(
        None, description="several hosts: the git remote (of the fleet root) of the shared bare repository; worktrees "
                          "start from its main and proposals are pushed to it with a compare-and-swap (docs/scale.md)")
    host_ttl: Duration = Field(
        written("90s"), description="several hosts (shared_remote): a host whose dispatcher has not renewed its host lease for this "
                           "long is lost; the leading supervisor requeues its tickets (docs/scale.md)")
    main_gates: list[Gate] = Field(default_factory=list, description="run on main; failing = red, pauses dispatch")
    merge_gates: list[Gate] = Field(default_factory=list, description="run on the merge result of a proposal")
    dispatch_tick: Duration = written("30s")
    heartbeat: Duration = written("30s")
    runtime: Literal["process", "container"] = "process"
    image: str = "healer-python"
    container_network: Literal["none", "host"] = Field(
        "none", description="network_mode of agent containers (container runtime): none, or host when the agent needs it")
    loop_command: list[str] = Field(
        default_factory=lambda: ["{python}", "-m", "healer", "loop", "run", "--policy", "{policy}", "--task", "{task_file}",
                                 "--workdir", "{workdir}", "--root", "{root}", "--run-id", "{run_id}"],
        description="argv of the agent loop the dispatcher launches per ticket; placeholders {python} {policy} "
                    "{task_file} {workdir} {root} {run_id} {ticket}; never a shell",
    )
    resume_args: list[str] = Field(default_factory=lambda: ["--resume", "{run_id}"],
                                   description="appended to loop_command when a dead agent is resumed in its worktree")
    task_template: str = Field("# {ticket}: {title}\n\n{body}\n",
                               description="the task file given to the loop; {ticket} {title} {body}")
    evidence_lines: PosInt = Field(20, description="gate-log lines quoted in a needs-human evidence comment")
    wait_labels: list[str] = Field(default_factory=lambda: ["to-review"],
                                   description="labels meaning 'wait' (for a review): a queued ticket carrying one is not "
                                               "launched until the label is dropped (by a human, or as a stale label)")
    pause_on_red_main: bool = Field(True, description="the dispatcher pauses itself while main is red; off, the "
                                                      "supervisor's main_red sentinel (rule pause-on-red-main) pauses it")
    min_free: NonNegInt = Field(
        256 * 1024 * 1024, description="bytes free needed where the fleet writes (store, worktrees, run folders) to "
                                       "launch; below it nothing is launched, old run folders are reclaimed and a "
                                       "disk_low finding pages (0: no check)")


class Supervisor(Strict):
    tick: Duration = written("30s")
    lease_ttl: Duration = written("90s")
    clock_tolerance: Duration | None = Field(
        written("30s"), description="a wall clock that moved this much more or less than the monotonic clock between two "
                           "passes (a step), or a host clock this far off the store's (PostgreSQL), is reported once "
                           "(clock.jump / clock.skew) and no stop, removal, requeue, escalation or silence page rests "
                           "on an age that crossed it until confirmed on the monotonic clock (docs/supervisor.md, "
                           "Time); null: clocks are trusted")


class StoreSettings(Strict):
    outage_tolerance: Duration = Field(
        written("3m"), description="how long a daemon (up, dispatch, supervise) rides out a store that is away (PostgreSQL "
                          "restarted or failed over, SQLite locked): passes wait and retry with backoff; past this, "
                          "one line and exit 69 (docs/restarts.md)")




class Policy(Strict):
    version: Literal[1] = 1
    loop: Loop = Field(default_factory=Loop)
    retry: Retry = Field(default_factory=Retry)
    health: Health = Field(default_factory=Health)
    sentinels: Sentinels = Field(default_factory=Sentinels)
    remediation: Remediation = Field(default_factory=Remediation)
    repair_agent: RepairAgent = Field(default_factory=RepairAgent)
    notify: Notify = Field(default_factory=Notify)
    rules: list[Rule] = Field(default_factory=list)
    include_runbooks: list[str] = Field(default_factory=list, description="folders or files of runbooks to enforce")
    fleet: Fleet = Field(default_factory=Fleet)
    supervisor: Supervisor = Field(default_factory=Supervisor)
    store: StoreSettings = Field(default_factory=StoreSettings)
    adopt: Adopt = Field(default_factory=Adopt)

    @model_validator(mode="before")
    @classmethod
    def _runbooks_str(cls, data: object) -> object:
        if isinstance(data, dict) and isinstance(data.get("include_runbooks"), str):
            data = {**data, "include_runbooks": [data["include_runbooks"]]}
        return data


def json_schema() -> dict:
    schema = Policy.model_json_schema(mode="validation")
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = "healer policy"
    return schema
