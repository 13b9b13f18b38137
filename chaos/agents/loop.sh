#!/usr/bin/env bash
# The closed bash loop the real adopted-loop game days start when the reference fixture loop.sh is not on this machine
# (HEALER_LOOP_SH_FIXTURE, or a wheel installed elsewhere): the same shape, written here. It relaunches an agent
# command until the gates pass or MAX_ITER is spent; the prompt goes in a file, one per iteration (.loop/prompt-N.md,
# what an adopt rule's iterations_glob counts); the loop, not the agent, runs the gates.
set -uo pipefail

MAX_ITER="${MAX_ITER:-8}"
GATES="${GATES:-false}"
TASK=task.md; PROGRESS=progress.md; LOGS=.loop
mkdir -p "$LOGS"; touch "$PROGRESS"

for i in $(seq 1 "$MAX_ITER"); do
  echo "== iteration $i/$MAX_ITER"
  { cat "$TASK" 2>/dev/null; printf '\n## Progress so far\n'; tail -n 60 "$PROGRESS"
    printf '\n## Last gates output\n'; tail -n 80 "$LOGS/gates.log" 2>/dev/null
    printf '\nTake ONE small step towards the goal, then add a short "## iter %s" entry to %s.\n' "$i" "$PROGRESS"
  } > "$LOGS/prompt-$i.md"
  $AGENT "$LOGS/prompt-$i.md" > "$LOGS/agent-$i.log" 2>&1
  if bash -c "$GATES" > "$LOGS/gates.log" 2>&1; then
    git add -A && git commit -qm "loop: done at iteration $i"
    echo "Done in $i iterations."; exit 0
  fi
done
echo "Budget spent after $MAX_ITER iterations."; exit 2
