"""What this Ray lacks of what raydbg would use: one line each, for `raydbg status`.

Written for Ray 2.51.x to 2.60.x. Each line comes from detecting what Ray's modules have,
never from a version string; the version only names the Ray in the line. Differences
raydbg bridges (task events, the state accessor, tracing before
`tracing_helper._get_opentelemetry`) need no line: they work.
"""

from __future__ import annotations

from raydbg._ray_internals.authentication import token_auth_in_ray


def missing_features() -> list[str]:
    """One line per raydbg feature this Ray cannot give, saying what applies instead."""
    import ray

    lines = []
    if not token_auth_in_ray():
        lines.append(f"Ray token auth: not in Ray {ray.__version__}, raydbg's own token in use")
    return lines
