"""``pq undo`` and ``pq redo``: put back what the last series-editing command wrote (``stg undo`` / ``stg redo``).

pq keeps one command: ``.git/pq/undo.json`` holds the old and new value of every file and ref the
last undoable command (new, record, push, pop, goto, delete, rename, edit, squash, float, sink,
import, accept, resolutions drop) wrote, in the same
journaled step (see :mod:`patch_queue.project.journal`).  ``pq undo`` writes the old values back
when every one of them still holds its new value (anything changed since: one line naming it,
nothing written), as a journaled command of its own; ``pq redo`` takes an undo back.  A refresh
is undone by ``pq abort``; ``refs/pq/resolutions`` only grows and is left as it is, but for what
``pq resolutions drop`` removed.
"""

from __future__ import annotations

from patch_queue.commands.write import module_files
from patch_queue.errors import QueueError
from patch_queue.fsutil import read_folder
from patch_queue.outputs import folder as output
from patch_queue.project.journal import last_undoable, undo_writes
from patch_queue.project.operation import OperationKind, load, refuse_pending
from patch_queue.project.workspace import Workspace
from patch_queue.series import stack


def do_undo(ws: Workspace, *, redo: bool = False, discard: bool = False) -> tuple[str, str, OperationKind | None]:
    """Undo the last undoable command (``redo``: the last undo); returns (the command undone, what --discard
    dropped, the operation pending again: a merge `pq continue` finished, back to where continue found it)."""
    refuse_pending(ws)
    record = last_undoable(ws)
    if record is None:
        raise QueueError("not enough undo information available: no command pq can undo has run here")
    if redo and record.command != "undo":
        raise QueueError(f"the last command was `pq {record.command}`, not an undo: nothing to redo")
    if not redo and record.command == "undo":
        raise QueueError(
            "not enough undo information available: pq keeps the last command only, and that was `pq undo` "
            "(`pq redo` takes it back)"
        )
    top = ws.repo.ref(stack.REF_TOP)
    built = module_files(ws, top) if top is not None and ws.repo.has_object(top) else {}
    # the top it puts back holds an edit of the output folder as it is (`pq new --record` undone, then redone):
    # nothing is lost, and that edit is not in the way
    back = record.refs.get(stack.REF_TOP, (top, top))[0]
    held = module_files(ws, back) if back is not None and ws.repo.has_object(back) else {}
    have = read_folder(ws.out) if ws.out.is_dir() else {}
    edited = [e for e in output.edits(ws.out, built) if e.file not in held or have.get(e.file) != held[e.file]]
    output.refuse_edits(ws.out, built, shown=ws.rel(ws.out), discard=discard, found=edited)
    restore = {ws.out / e.file: built.get(e.file) for e in edited}  # what pq wrote there
    writes = undo_writes(ws, record, "redo" if redo else "undo", restore=restore)
    writes.commit()
    pending = load(ws)
    return record.command, output.discarded(edited), pending.kind if pending is not None else None
