"""What a replay did to a patch, and where ``pq status`` shows one stands: a module of its own, so that reading
a pending operation (``pq status``) does not import the replay."""

from __future__ import annotations

from enum import StrEnum


class PatchStatus(StrEnum):
    """What a replay did to a patch (its text is the report's and the terminal's), and where `pq status` shows
    one stands."""

    UNCHANGED = "unchanged"  # its parent did not change: the same patch
    MODIFIED = "modified"
    CONFLICT = "conflict"  # conflict regions left in its commit
    EMPTY = "empty"  # upstream holds it all: it changes nothing
    PENDING = "pending"  # a refresh stopped before it
    APPLIED = "applied"
    UNAPPLIED = "unapplied"
