"""quarantine_file: move unknown files to the quarantine, restorable byte for byte. Nothing is deleted."""

from healer.actions.spec import ActionSpec, Step, Tool


def plan(s: Step):
    files = s.evidence.get("files") or []
    if not files:
        return []
    root = s.evidence.get("root") or ""
    return [s.action(root or files[0], root=root, files=list(files), ticket=s.ticket)]


SPEC = ActionSpec(
    name="quarantine_file",
    summary="move unknown files to the quarantine (restorable)",
    lease="subject",
    answers=frozenset({"orphan_worktree", "unknown_file"}),
    plan=plan,
    handler="healer.remedy.handlers.files:QUARANTINE_FILE",
    tool=Tool("Move unknown files (paths inside the fleet) to the quarantine, restorable byte for byte. Nothing is "
              "deleted.", subjects="paths",
              fixes=frozenset({"unknown_file"}), rank=50, hint="unknown files"),
)
