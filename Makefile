# make run   : set up .venv and run the main job (a demo fleet healed live, then the game-day summary)
# make test  : install what the tests need and run them
PYTHON ?= python3
VENV   := .venv
PY     := $(VENV)/bin/python
STAMP  := $(VENV)/.installed

# all of healer/ (settings: pyproject.toml [tool.mypy]), and the ports' conformance files with chaos's ports: every
# adapter satisfies its Protocol (mypy, structural); the rest of chaos is read for its types only
MYPY_FILES := healer tests/typing/ports_conform.py \
	chaos/faults/world.py chaos/faults/sim_world.py chaos/faults/real_world.py chaos/faults/board.py chaos/faults/worlds.py \
	chaos/engine/base.py tests/typing/chaos_conform.py

# the dispatcher and its collaborators (issue 42), each a class given what it needs: every def annotated, every body
# checked, so a collaborator that reaches for an attribute nobody gave it fails here
MYPY_DISPATCH := --follow-imports=silent --ignore-missing-imports --no-error-summary --check-untyped-defs \
	--disallow-untyped-defs healer/fleet/dispatcher.py healer/fleet/dispatch_*.py healer/core/dispatch_steps.py healer/core/dispatch_pass.py

.PHONY: run test test-long campaigns bench lint images clean install agents-cli

# the real agent CLIs for tests/agents (issue 32), pinned; into the venv, never the machine's global prefix
CLAUDE_CODE_VERSION := 2.1.332
CODEX_VERSION       := 0.169.0
AGENTS_CLI          := $(VENV)/agents-cli

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	-$(PY) -m pip uninstall -q -y healer 2>/dev/null  # the distribution was renamed fleet-healer
	$(PY) -m pip install -q --disable-pip-version-check -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: $(STAMP)
	$(VENV)/bin/healer demo

# Two phases (issue 35): every independent test spread over the cores (pytest-xdist, TEST_JOBS workers; TEST_JOBS=0
# for one process), then the tests marked `serial` (they time wall-clock budgets or watch what the whole machine
# does, and failed side by side with their neighbours: the reason is beside each mark) one after the other.
# Both phases always run; exit 5 (none collected, e.g. PYTEST_ARGS names a file with no serial test) is fine,
# any other failure fails `make test`. HEALER_TEST_SUBPROCESS=1 runs every CLI call of the tests in a child.
# twice the cores (at most 8): most tests wait on child processes, git and servers rather than the CPU, so two workers
# per core keep both busy (this 2-core machine: 9 min 37 s with 2 workers, 8 min 5 s with 4)
TEST_JOBS ?= $(shell n=$$(nproc 2>/dev/null || echo 2); n=$$((n * 2)); [ $$n -gt 8 ] && n=8; echo $$n)
test: $(STAMP)
	@rc1=0; rc2=0; \
	$(PY) -m pytest -q -n $(TEST_JOBS) -m 'not campaign and not serial and not long' $(PYTEST_ARGS) || rc1=$$?; \
	echo "make test: the serial tests, one at a time"; \
	$(PY) -m pytest -q -n 0 -m 'serial and not campaign and not long' $(PYTEST_ARGS) || rc2=$$?; \
	for rc in $$rc1 $$rc2; do case $$rc in 0|5) ;; *) echo "make test: failed (parallel phase exit $$rc1, serial phase exit $$rc2)"; exit 1;; esac; done

# the tests marked `long` (each over 10 s of `make test`'s time, measured 2026-12-07: real game days, real agent CLIs,
# crash-and-restart runs, whole-CLI game days), held out so `make test` stays under 10 minutes; .ci/run runs this
# right after `make test`, the same way (parallel, then serial), and it must pass as `make test` must
test-long: $(STAMP)
	@rc1=0; rc2=0; \
	$(PY) -m pytest -q -n $(TEST_JOBS) -m 'long and not campaign and not serial' $(PYTEST_ARGS) || rc1=$$?; \
	$(PY) -m pytest -q -n 0 -m 'long and serial and not campaign' $(PYTEST_ARGS) || rc2=$$?; \
	for rc in $$rc1 $$rc2; do case $$rc in 0|5) ;; *) echo "make test-long: failed (parallel phase exit $$rc1, serial phase exit $$rc2)"; exit 1;; esac; done

# long campaigns (restart storms, multi-host): run by .ci/run after `make test`
campaigns: $(STAMP)
	$(PY) -m pytest -q -m campaign $(PYTEST_ARGS)

# every bench/*.py, then the mutation bench (bench/mutants.py) on MUTANTS fresh mutants drawn from SEED (default: a
# fresh seed, printed in its `draw` line to replay the run) one at a time (jobs 1: the suite's tests use both cores),
# the unit files chosen by import (the coverage map takes > 1 h on this machine), the numbers appended to
# bench/mutants_runs.jsonl
MUTANTS ?= 6
SEED    ?=
bench: $(STAMP)
	@for f in bench/*.py; do case $$f in bench/mutants.py|bench/mutate.py|bench/mutants_plugin.py) continue;; esac; \
		$(PY) $$f || exit 1; done
	$(PY) bench/mutants.py --mutants $(MUTANTS) --jobs 1 --static-unit --record $(if $(SEED),--seed $(SEED))

lint: $(STAMP)
	$(VENV)/bin/ruff check healer chaos tests bench
	$(VENV)/bin/mypy --no-error-summary $(MYPY_FILES)
	$(VENV)/bin/mypy $(MYPY_DISPATCH)
	$(VENV)/bin/lint-imports  # the layers: pyproject.toml [tool.importlinter], README "Architecture"

agents-cli:
	@if [ "$$($(AGENTS_CLI)/bin/claude --version 2>/dev/null | cut -d' ' -f1)" = "$(CLAUDE_CODE_VERSION)" ] && \
	    [ "$$($(AGENTS_CLI)/bin/codex --version 2>/dev/null | cut -d' ' -f2)" = "$(CODEX_VERSION)" ]; then \
	  echo "agents-cli: claude $(CLAUDE_CODE_VERSION) and codex $(CODEX_VERSION) already in $(AGENTS_CLI)"; \
	else \
	  npm install -g --no-fund --no-audit --prefix $(AGENTS_CLI) \
	    @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION) @openai/codex@$(CODEX_VERSION) && \
	  $(AGENTS_CLI)/bin/claude --version && $(AGENTS_CLI)/bin/codex --version; \
	fi

images: $(STAMP)
	$(PY) -m healer.containers.images

clean:
	rm -rf $(VENV) build *.egg-info
