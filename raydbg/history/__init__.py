"""A job's durable record: what raydbg saw of it, kept after its cluster is gone (docs/history.md).

store.py (where: a private local directory or a pyarrow URI), writer.py (the gateway's one
writer per file: a background thread, bounded buffer, retries), lifecycle.py and spans.py
(what the gateway's recorder, raydbg/agent_host/history_recorder.py, turns into entries),
reader.py (torn lines skipped), view.py (the text of `raydbg history show`), html.py (the
self-contained report). No Ray import: `raydbg history` reads with no cluster.
"""
