"""The shell's half of each remediation action: check, apply, verify (one `Handler` per action).

Grouped by what they act on: tickets.py (close, drop a label, requeue, unblock, escalate), agents.py (resume,
stop), files.py (quarantine a file, remove a worktree), fleet.py (pause and resume dispatch, notify); common.py
holds what several share. Each action's spec (healer/actions/<name>.py) names its handler here as
"healer.remedy.handlers.<module>:NAME"; the executor (healer/remedy/actions.py) runs them all the same way.
"""
