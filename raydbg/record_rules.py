"""What every record keeps, importable anywhere at no cost (no msgspec): size limits, the id pattern, the Train names.

raydbg/schema.py defines the records with these; a worker imports this module alone
until it writes a record (msgspec and the structs cost a few ms to import).
"""

from __future__ import annotations

MAX_RECORD_BYTES = 1024 * 1024
MAX_TEXT = 4096  # names, paths, ids
MAX_LONG_TEXT = 64 * 1024  # exception message and traceback, event message
MAX_PID = 2**31 - 1
ID_PATTERN = r"^[A-Za-z0-9_.-]{1,128}$"
# The marker raydbg/record_fit.py leaves where it cut a record (readers check a cut record's
# top level only: its markers stand in lists and objects).
CUT_NOTE = "cut: raydbg records are capped at 1 MiB"

# A Train rank's identity: the session record's names (from raydbg.ray_context) -> the names
# the gang records (progress beats, stacks reports, pause answers) carry. The one table.
TRAIN_NAMES = {
    "train_run": "train_run",
    "train_rank": "world_rank",
    "train_local_rank": "local_rank",
    "train_world_size": "world_size",
}
