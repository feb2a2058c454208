"""Pure kill policy: a node memory snapshot -> ordered victims, each with a reason.

No Ray import and no I/O: the monitor builds a `Snapshot`, calls `decide`, kills.

Preference (best victim first), by stage:
  0  idle workers (no task lost), when together they free enough,
  1  retriable tasks,  2  restartable actors,
  3  idle workers otherwise (killing a few small ones would only add kills),
  4  non-retriable tasks,  5  non-restartable actors (unknown budget = none).
Within a stage: never the last running task of a caller while the stage's other
candidates can free enough; workers raydbg already killed go after fresh ones (their
retries must not burn out); groups by caller, largest group first, then the group
whose oldest member is newest; newest first within a group.

Selection: stages strictly in order (a worse stage is touched only when the better
ones cannot free enough). Non-retriable work (stages 4-5) is killed only on a real
crossing (never on a trend alone), never in a round that already killed retriable
work (re-measure first), and only for what is over the target now. Inside the current stage the first candidate in preference
order that alone frees what is still needed is chosen (one kill rather than several);
when none does, simply the first in preference order. Stop as soon as the deficit
is covered. The deficit counts the node's growth over `project_s` (the time until
the next round can act), and a growing victim's freed memory counts its own.

Expected peaks: a candidate may carry what its whole process is expected to reach
(`expected_peak`: its function's complete learned peak, or the room the start gate
admitted it with). A task growing toward a known peak is counted only up to that peak,
in the trend trigger, in the projected deficit and in what its kill frees: the gate
admitted it into room that fits that peak, so killing it for growth it will not have
would undo the gate's work. A task past its expected peak counts as unknown (growth
uncapped): the estimate was wrong.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

IDLE, TASK, ACTOR = "idle", "task", "actor"
STAGE_NAMES = (  # by stage (the one ordering, see the module docstring)
    "idle worker",
    "retriable task",
    "restartable actor",
    "idle worker",
    "non-retriable task",
    "non-restartable actor",
)


@dataclass(frozen=True)
class Candidate:
    """A worker process the monitor may kill (never a driver or a system process)."""

    pid: int
    memory: int  # bytes freed if it dies (USS)
    kind: str = TASK  # "task", "actor" or "idle"
    start_time: float = 0.0  # when the running task/actor started (epoch s)
    owner: str | None = None  # caller: parent task id, or the actor's owner
    retries_left: int | None = None  # None: unknown (treated as none); -1: infinite
    name: str = ""
    task_id: str | None = None
    actor_id: str | None = None
    job_id: str | None = None
    attempt: int | None = None
    growth: float = 0.0  # bytes/s, measured by the monitor
    gpu_memory: int = 0
    prior_kills: int = 0  # how often raydbg already killed this task/actor
    function_id: str | None = None  # a task's function (joins its learned peak)
    expected_peak: int = 0  # bytes the process is expected to reach; 0: unknown
    peak_source: str = "unknown"  # "learned", "reservation" or "unknown"

    @property
    def retriable(self) -> bool:
        if self.kind == IDLE:
            return True
        return self.retries_left is not None and (self.retries_left > 0 or self.retries_left < 0)


@dataclass(frozen=True)
class PolicyConfig:
    threshold: float = 0.9  # fraction of the limit where raydbg acts
    min_free: int = 0  # act also when less than this many bytes are free
    margin: float = 0.05  # get back under threshold minus this fraction of the limit
    horizon_s: float = 0.5  # act when the limit would be reached within this time
    project_s: float = 0.25  # growth counted into the deficit (kill -> memory freed -> next round)


@dataclass(frozen=True)
class Snapshot:
    used: int
    limit: int
    candidates: tuple[Candidate, ...] = ()
    growth: float = 0.0  # node bytes/s (smoothed)


@dataclass(frozen=True)
class Victim:
    candidate: Candidate
    reason: str
    freed: int  # bytes this kill is counted for (memory + growth over the horizon)


@dataclass(frozen=True)
class Decision:
    action: str  # "none", "kill" or "nothing-to-kill"
    trigger: str | None  # "threshold", "min-free", "trend" or None
    threshold_bytes: int
    target_bytes: int
    need: int  # bytes to free (0 when no action)
    victims: tuple[Victim, ...] = ()
    order: tuple[Candidate, ...] = field(default_factory=tuple)  # full preference order
    message: str = ""


def threshold_bytes(limit: int, cfg: PolicyConfig) -> int:
    t = int(limit * cfg.threshold)
    if cfg.min_free > 0:
        t = min(t, limit - cfg.min_free)
    return max(0, t)


def marks(limit: int, cfg: PolicyConfig) -> tuple[int, int]:
    """(low, high) bytes: the kill target (threshold - margin), and where the start gate
    holds fresh starts (threshold - margin/2). Every mark derives from threshold_bytes,
    so min-free moves them all."""
    thr = threshold_bytes(limit, cfg)
    return max(0, thr - int(cfg.margin * limit)), max(0, thr - int(cfg.margin * limit / 2))


def trigger_of(used: int, limit: int, growth: float, cfg: PolicyConfig) -> str | None:
    """Why to act now, or None. `growth`: bytes/s, or already the bytes the node will
    add within `cfg.horizon_s` when called by `decide` (see `grown`)."""
    return _trigger(used, limit, max(0.0, growth) * cfg.horizon_s, cfg)


def _trigger(used: int, limit: int, grows: float, cfg: PolicyConfig) -> str | None:
    if used >= int(limit * cfg.threshold):
        return "threshold"
    if cfg.min_free > 0 and used >= limit - cfg.min_free:
        return "min-free"
    if grows > 0 and grows > limit - used:
        return "trend"
    return None


def own_growth(candidate: Candidate, seconds: float) -> float:
    """Bytes `c` adds within `seconds`: its growth, stopped at its expected peak if it
    is still below it."""
    g = max(0.0, candidate.growth) * seconds
    if candidate.expected_peak > candidate.memory:
        return min(g, float(candidate.expected_peak - candidate.memory))
    return g


def grown(snap: Snapshot, seconds: float) -> float:
    """Bytes the node adds within `seconds`: its growth, less what candidates with a
    known peak would grow past it."""
    beyond = sum(max(0.0, c.growth) * seconds - own_growth(c, seconds) for c in snap.candidates)
    return max(0.0, max(0.0, snap.growth) * seconds - beyond)


def freed_by(candidate: Candidate, cfg: PolicyConfig) -> int:
    # A growing victim also stops growing: count its growth until the next round.
    return candidate.memory + int(own_growth(candidate, cfg.project_s))


def stage(candidate: Candidate, idle_first: bool = True) -> int:
    """Position in the preference order (see the module docstring): the one ordering."""
    if candidate.kind == IDLE:
        return 0 if idle_first else 3
    return (1 if candidate.retriable else 4) + (1 if candidate.kind == ACTOR else 0)


def _group_key(c: Candidate) -> str:
    return c.owner if c.owner is not None else f"pid:{c.pid}"


def last_of_caller(candidates: list[Candidate]) -> frozenset[int]:
    """Pids of the running tasks that are their caller's last among `candidates`: the
    one place the last-of-caller rule is computed."""
    alive = Counter(c.owner for c in candidates if c.kind != IDLE and c.owner is not None)
    return frozenset(
        c.pid for c in candidates if c.kind != IDLE and c.owner is not None and alive[c.owner] <= 1
    )


def rank(
    candidates: tuple[Candidate, ...] | list[Candidate],
    chosen: frozenset[int] = frozenset(),
    idle_first: bool = True,
) -> tuple[list[Candidate], frozenset[int]]:
    """All candidates not in `chosen`, best victim first (see the module docstring), and
    which of them are their caller's last running task once `chosen` die."""
    rest = [c for c in candidates if c.pid not in chosen]
    last = last_of_caller(rest)
    group_size: Counter[tuple[int, str]] = Counter(
        (stage(c, idle_first), _group_key(c)) for c in candidates
    )
    group_oldest: dict[tuple[int, str], float] = {}
    for c in candidates:
        k = (stage(c, idle_first), _group_key(c))
        group_oldest[k] = min(group_oldest.get(k, c.start_time), c.start_time)

    def key(c: Candidate) -> tuple[object, ...]:
        g = (stage(c, idle_first), _group_key(c))
        if c.kind == IDLE:  # idle: biggest first, nothing else matters
            return (stage(c, idle_first), False, False, 0, 0.0, "", -c.memory, 0.0, c.pid)
        return (
            stage(c, idle_first),
            c.pid in last,
            c.prior_kills > 0,
            -group_size[g],
            -group_oldest[g],
            g[1],  # stable tie-break between equal groups
            0,
            -c.start_time,
            c.pid,
        )

    return sorted(rest, key=key), last


def preference_order(
    candidates: tuple[Candidate, ...] | list[Candidate],
    chosen: frozenset[int] = frozenset(),
    idle_first: bool = True,
) -> list[Candidate]:
    """All candidates not in `chosen`, best victim first (see the module docstring)."""
    return rank(candidates, chosen, idle_first)[0]


def _gib(n: float) -> str:
    return f"{n / (1 << 30):.2f} GiB"


def _reason(
    c: Candidate,
    pool: list[Candidate],
    st: int,
    covers: bool,
    need_left: int,
    freed: int,
    last: bool,
    better_chosen: int,
    small: bool = False,
) -> str:
    parts = [STAGE_NAMES[st]]
    if c.kind == IDLE and small:
        parts.append("idle workers together free too little, so taken after retriable work")
    if c.kind != IDLE:
        if c.retries_left is None:
            parts.append("retry budget unknown, treated as none")
        elif c.retries_left < 0:
            parts.append("infinite retries")
        else:
            parts.append(f"{c.retries_left} retries left")
    if c.kind != IDLE:
        parts.append(
            f"better-placed candidates already chosen: {better_chosen}"
            if better_chosen
            else "no better-placed candidate on this node"
        )
    if c.owner is not None and c.kind != IDLE:
        group = sum(1 for x in pool if x.owner == c.owner)
        parts.append(f"caller {c.owner[:16]} has {group} running here (newest first)")
        if last:
            parts.append("its caller's last running task: the others cannot free enough")
    if c.prior_kills:
        parts.append(f"already killed {c.prior_kills}x by raydbg")
    if covers:
        parts.append(f"frees {_gib(freed)}, enough for the {_gib(need_left)} still needed")
    else:
        parts.append(
            f"frees {_gib(freed)} of the {_gib(need_left)} still needed; none alone frees enough"
        )
    return "; ".join(parts)


def decide(snap: Snapshot, cfg: PolicyConfig | None = None) -> Decision:
    """The whole policy: when to act, how much to free, whom to kill and why."""
    cfg = cfg or PolicyConfig()
    thr = threshold_bytes(snap.limit, cfg)
    target = marks(snap.limit, cfg)[0]
    trig = _trigger(snap.used, snap.limit, grown(snap, cfg.horizon_s), cfg)
    if trig is None:
        return Decision("none", None, thr, target, 0, message="below threshold")
    projected = snap.used + int(grown(snap, cfg.project_s))
    need = projected - target
    if need <= 0:
        # Only a trend trigger gets here: fast growth, but not past the target in time
        # for the next round to matter. Watch (the monitor polls fast), do not kill.
        return Decision("none", trig, thr, target, 0, message="growth seen; not past target yet")
    idle_first = sum(freed_by(c, cfg) for c in snap.candidates if c.kind == IDLE) >= need
    # A kill that frees nothing is never worth a task (a worker that has not
    # allocated yet): leave it out.
    useless = frozenset(c.pid for c in snap.candidates if freed_by(c, cfg) <= 0)
    order_all = preference_order(snap.candidates, useless, idle_first)
    if not order_all:
        return Decision(
            "nothing-to-kill", trig, thr, target, need, message="no killable worker on this node"
        )
    victims: list[Victim] = []
    chosen: set[int] = set()
    need_left = need
    held_back = ""
    while need_left > 0:
        order, last = rank(snap.candidates, frozenset(chosen) | useless, idle_first)
        if not order:
            break
        head = order[0]
        st = stage(head, idle_first)
        if st >= 4:
            # Losing work that cannot be retried needs more than a forecast: a real
            # crossing, no retriable kill this round (re-measure after those exit first),
            # and only what is over the target now, not the projection.
            if trig == "trend":
                held_back = "; non-retriable work is not killed on a trend alone"
                break
            if any(stage(v.candidate, idle_first) < 4 for v in victims):
                held_back = "; non-retriable work waits for the next round"
                break
            need_left = min(need_left, snap.used - target)
            if need_left <= 0:
                break
        in_stage = [c for c in order if stage(c, idle_first) == st]
        nonlast = [c for c in in_stage if c.pid not in last]
        # A caller's last running task is spared while the others can free enough.
        enough = sum(freed_by(c, cfg) for c in nonlast) >= need_left
        pool = nonlast if nonlast and enough else in_stage
        cover = [c for c in pool if freed_by(c, cfg) >= need_left]
        pick = cover[0] if cover else pool[0]
        freed = freed_by(pick, cfg)
        better = sum(1 for v in victims if stage(v.candidate, idle_first) < st)
        small = pick.kind == IDLE and st == 3
        reason = _reason(
            pick, in_stage, st, bool(cover), need_left, freed, pick.pid in last, better, small
        )
        victims.append(Victim(pick, reason, freed))
        chosen.add(pick.pid)
        need_left -= freed
    short = held_back or (
        f"; all candidates together free too little ({_gib(need_left)} short)"
        if need_left > 0
        else ""
    )
    msg = (
        f"{trig}: used {_gib(snap.used)} of {_gib(snap.limit)} (threshold {_gib(thr)}), "
        f"need {_gib(need)} to get under {_gib(target)}; kill {len(victims)} of {len(order_all)}{short}"
    )
    return Decision("kill", trig, thr, target, need, tuple(victims), tuple(order_all), msg)
