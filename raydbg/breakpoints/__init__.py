"""Armed breakpoints: set from the CLI or an editor, kept in the registry, armed in every worker of a job.

model.py     pure: the Breakpoint record, input checks, path matching, owner replacement
store.py     the registry side: records, the version key, hit counters, cluster-wide pause slots
api.py       the gateway's /api/v1/breakpoints routes
../commands/breakpoints.py  `raydbg break add|list|rm`
worker.py    in each activated worker: a poll thread, conditions, hit limit, the pause hand-off
monitoring.py  Python 3.12+: a sys.monitoring tool of raydbg's own (LINE only where armed)
settrace.py  Python 3.11: a settrace fallback (opt-in: RAYDBG_BREAK_PY311=1; it costs more)
"""
