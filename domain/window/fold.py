"""Per-conversation sliding-window summary fold (seeds 000, 002): pure, clock passed in."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Union

from core.settings import WindowSettings
from schemas import registry
from schemas.erasure_events import REDERIVE_REQUESTED


@dataclass(frozen=True)
class WindowConfig:
    window_size: int = 14
    summarize_after_seq: int = 5
    request_timeout_s: float = 120.0
    max_attempts: int = 3
    failure_backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    prompt_version: str = "summary-v1"
    model: str = "gpt-4.1-mini"
    # A saved message with one of these roles ends a round and may trigger a summary.
    trigger_roles: tuple[str, ...] = ("assistant",)
    # Replay of historic messages: a summary every `replay_stride` seqs, chained on the
    # previous request, whatever is in flight — so a replay is the same every time. Live, a
    # round end that finds a request in flight is chained the same way once it is this far
    # past the newest request (the backlog rule): a burst asks for the replay's windows.
    replay_stride: int = 4
    # Catch-up: a completion, failure or tick that finds at least this many messages since
    # the latest completed summary requests the window of the newest round end at once
    # (one request however long the backlog; the next round end would come too late, or
    # never, after a bulk ingest). None: window_size.
    catch_up_backlog: int | None = None

    @property
    def backlog_limit(self) -> int:
        return self.window_size if self.catch_up_backlog is None else self.catch_up_backlog

    @classmethod
    def from_settings(cls, window: WindowSettings, prompt_version: str, model: str) -> WindowConfig:
        return cls(
            window_size=window.window_size, summarize_after_seq=window.summarize_after_seq,
            request_timeout_s=window.request_timeout_s, max_attempts=window.max_attempts,
            prompt_version=prompt_version, model=model, replay_stride=window.replay_stride,
            catch_up_backlog=window.catch_up_backlog,
        )


def calculate_summary_range(last_saved_seq: int, window_size: int) -> tuple[int, int]:
    """Seed 000: the newest `window_size` messages, start bumped to even to keep pairs."""
    end_seq = last_saved_seq
    start_seq = max(0, end_seq - window_size + 1)
    if start_seq % 2 != 0:
        start_seq += 1
    return start_seq, end_seq


@dataclass(frozen=True)
class MessageSaved:
    seq: int
    role: str
    # Part of the history a replay rebuilds (see WindowConfig.replay_stride).
    historic: bool = False


@dataclass(frozen=True)
class SummaryDone:
    memory_id: int
    attempt: int
    start_seq: int
    end_seq: int


@dataclass(frozen=True)
class SummaryGaveUp:
    memory_id: int
    attempt: int
    error: str


@dataclass(frozen=True)
class Tick:
    """A timer fired: only the stuck-request scan runs."""


@dataclass(frozen=True)
class Rederive:
    """An erasure deleted the summaries from `first_seq` on (docs/lineage.md): summarize again,
    from the newest summary kept, up to where the newest summary had reached."""
    erasure_id: str
    first_seq: int
    base_memory_id: int | None
    base_end_seq: int | None


Observed = Union[MessageSaved, SummaryDone, SummaryGaveUp, Tick, Rederive]


def observe(event_type: str, payload: Any, seq: int | None = None) -> Observed | None:
    """Decoded event -> fold input; None for events the fold ignores (its own requests)."""
    if event_type == registry.MESSAGE_APPENDED:
        if seq is None:
            raise ValueError("message.appended needs the envelope seq")
        return MessageSaved(seq=seq, role=payload.role)
    if event_type == registry.SUMMARY_COMPLETED:
        return SummaryDone(payload.memory_id, payload.attempt, payload.start_seq, payload.end_seq)
    if event_type == registry.SUMMARY_FAILED:
        return SummaryGaveUp(payload.memory_id, payload.attempt, payload.error)
    if event_type == registry.WINDOW_TICKED:
        return Tick()
    if event_type == REDERIVE_REQUESTED:
        return Rederive(payload.erasure_event_id, payload.first_seq, payload.base_memory_id, payload.base_end_seq)
    return None


@dataclass(frozen=True)
class RequestSummary:
    memory_id: int
    start_seq: int
    end_seq: int
    base_memory_id: int | None
    base_end_seq: int | None
    attempt: int
    prompt_version: str
    model: str


@dataclass(frozen=True)
class GiveUp:
    memory_id: int
    start_seq: int
    end_seq: int
    attempt: int
    error: str


@dataclass(frozen=True)
class ReplayRequest(RequestSummary):
    """A RequestSummary made for a historic message (chained, see `replay_stride`)."""


Command = Union[RequestSummary, GiveUp]


@dataclass(frozen=True)
class InFlight:
    memory_id: int
    start_seq: int
    end_seq: int
    base_memory_id: int | None
    base_end_seq: int | None
    attempt: int
    requested_at: float


@dataclass(frozen=True)
class WindowState:
    last_seq: int = -1
    # Highest live (not historic) round end seen: the end of the window a catch-up asks for.
    pending_end: int = -1
    next_memory_id: int = 1
    in_flight: InFlight | None = None
    latest_completed: tuple[int, int, int] | None = None  # (memory_id, start_seq, end_seq)
    latest_requested: tuple[int, int, int] | None = None  # (memory_id, start_seq, end_seq)
    # Highest memory id requested for historic (replayed) messages; 0 if none.
    last_replay_request: int = 0
    consecutive_failures: int = 0
    not_before: float = 0.0
    requests: int = 0
    completions: int = 0
    failures: int = 0
    reissues: int = 0
    last_rederive: str = ""  # the erasure id last re-derived for (a redelivery changes nothing)

    def to_dict(self) -> dict[str, Any]:
        # Field by field: dataclasses.asdict deep-copies and costs ~25x more per event.
        data = {name: getattr(self, name) for name in self.__dataclass_fields__}
        if self.in_flight is not None:
            data["in_flight"] = {name: getattr(self.in_flight, name) for name in InFlight.__dataclass_fields__}
        for name in ("latest_completed", "latest_requested"):
            if data[name] is not None:
                data[name] = list(data[name])
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> WindowState:
        """Missing keys take their defaults, so older stored states still load."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("in_flight") is not None:
            known["in_flight"] = InFlight(**known["in_flight"])
        for name in ("latest_completed", "latest_requested"):
            if known.get(name) is not None:
                known[name] = tuple(known[name])
        return cls(**known)


def _with(state: WindowState, **changes: Any) -> WindowState:
    """dataclasses.replace without its per-call field introspection: the fold runs once per
    event, and replace() was half of its time (a replay folds the whole log)."""
    unknown = changes.keys() - WindowState.__dataclass_fields__.keys()
    if unknown:
        raise TypeError(f"WindowState has no fields {sorted(unknown)}")
    new = object.__new__(WindowState)
    new.__dict__.update(state.__dict__, **changes)
    return new


def _failed(state: WindowState, now: float, config: WindowConfig) -> WindowState:
    failures = state.consecutive_failures + 1
    not_before = state.not_before
    if failures >= config.max_attempts:
        delay = config.failure_backoff_s * 2 ** min(failures - config.max_attempts, 32)
        not_before = now + min(delay, config.max_backoff_s)
    return _with(state, in_flight=None, consecutive_failures=failures,
                   not_before=not_before, failures=state.failures + 1)


def evolve(state: WindowState, item: Observed | Command, now: float, config: WindowConfig) -> WindowState:
    """Apply one observed fact, or one of the fold's own commands, to the state."""
    flight = state.in_flight
    if isinstance(item, MessageSaved):
        if item.seq <= state.last_seq:
            return state
        if not item.historic and item.role in config.trigger_roles:
            return _with(state, last_seq=item.seq, pending_end=item.seq)
        return _with(state, last_seq=item.seq)
    if isinstance(item, SummaryDone):
        done = state.latest_completed
        if flight is None or item.memory_id != flight.memory_id:
            # Replay chains requests: an earlier one completing still moves the summary on.
            newer = done is None or (item.memory_id > done[0] and item.end_seq > done[2])
            if item.memory_id <= state.last_replay_request and newer:
                return _with(state, latest_completed=(item.memory_id, item.start_seq, item.end_seq),
                               completions=state.completions + 1)
            return state
        return _with(state, in_flight=None, consecutive_failures=0, not_before=0.0,
                       latest_completed=(item.memory_id, item.start_seq, item.end_seq),
                       completions=state.completions + 1)
    if isinstance(item, SummaryGaveUp):
        # A failure of an attempt we already replaced says nothing about the newer one.
        if flight is None or (item.memory_id, item.attempt) != (flight.memory_id, flight.attempt):
            return state
        return _failed(state, now, config)
    if isinstance(item, GiveUp):
        return _failed(state, now, config) if flight and flight.memory_id == item.memory_id else state
    if isinstance(item, Rederive):
        return _with(state, last_rederive=item.erasure_id)
    if isinstance(item, RequestSummary):
        fresh = item.attempt == 1
        return _with(
            state,
            in_flight=InFlight(item.memory_id, item.start_seq, item.end_seq, item.base_memory_id,
                               item.base_end_seq, item.attempt, now),
            latest_requested=(item.memory_id, item.start_seq, item.end_seq),
            last_replay_request=item.memory_id if isinstance(item, ReplayRequest) else state.last_replay_request,
            next_memory_id=max(state.next_memory_id, item.memory_id + 1),
            requests=state.requests + int(fresh), reissues=state.reissues + int(not fresh),
        )
    return state


def _sweep(state: WindowState, now: float, config: WindowConfig) -> tuple[Command, ...]:
    """Seed 000's stuck 'processing' rows: re-issue the same window, then give up."""
    flight = state.in_flight
    if flight is None or now - flight.requested_at <= config.request_timeout_s:
        return ()
    if flight.attempt < config.max_attempts:
        return (RequestSummary(flight.memory_id, flight.start_seq, flight.end_seq, flight.base_memory_id,
                               flight.base_end_seq, flight.attempt + 1, config.prompt_version, config.model),)
    error = f"no result after {flight.attempt} attempts of {config.request_timeout_s:g}s"
    return (GiveUp(flight.memory_id, flight.start_seq, flight.end_seq, flight.attempt, error),)


def _trigger(state: WindowState, seq: int, now: float, config: WindowConfig) -> tuple[Command, ...]:
    """Seed 000's trigger: far enough, nothing in flight, newer than the last summary."""
    done = state.latest_completed
    if (seq < config.summarize_after_seq or state.in_flight is not None
            or (done is not None and seq <= done[2]) or now < state.not_before):
        return ()
    start_seq, end_seq = calculate_summary_range(seq, config.window_size)
    return (RequestSummary(state.next_memory_id, start_seq, end_seq,
                           done[0] if done else None, done[2] if done else None,
                           1, config.prompt_version, config.model),)


def backlog(state: WindowState) -> int:
    """Live messages up to the newest round end that no completed summary covers yet."""
    done_end = state.latest_completed[2] if state.latest_completed else -1
    return max(0, state.pending_end - done_end)


def _catch_up(state: WindowState, now: float, config: WindowConfig) -> tuple[Command, ...]:
    """The seed trigger for the newest round end, re-checked when a summary settles (or a
    tick comes): without it a conversation ingested in one burst, or talking faster than the
    LLM answers, would keep its first summary until its next round end, if one ever comes."""
    if state.in_flight is not None or backlog(state) < config.backlog_limit:
        return ()
    return _trigger(state, state.pending_end, now, config)


def _replay_trigger(state: WindowState, seq: int, config: WindowConfig) -> tuple[Command, ...]:  
    """Historic messages: every `replay_stride` seqs, based on the previous request (not on
    what happened to have completed), so two replays of one log ask for the same windows."""
    last = state.latest_requested
    if seq < config.summarize_after_seq or (last is not None and seq - last[2] < config.replay_stride):
        return ()
    start_seq, end_seq = calculate_summary_range(seq, config.window_size)
    return (RequestSummary(state.next_memory_id, start_seq, end_seq,
                           last[0] if last else None, last[2] if last else None,
                           1, config.prompt_version, config.model),)


def _chains(state: WindowState, now: float) -> bool:
    """A live round end is chained on the newest request (the replay's stride rule) while one
    is in flight and the fold is not backing off after failures; otherwise the seed decides."""
    return state.in_flight is not None and state.latest_requested is not None and now >= state.not_before


def _rederive(state: WindowState, item: Rederive, config: WindowConfig) -> tuple[Command, ...]:
    """One request from the kept base to the end of the newest summary requested or completed
    (it replaces a request in flight: that one may have read the erased messages)."""
    ends = [s[2] for s in (state.latest_completed, state.latest_requested) if s is not None]
    end = max(ends, default=-1)
    if end < item.first_seq:
        return ()
    start = calculate_summary_range(end, config.window_size)[0]
    start = min(start, 0 if item.base_end_seq is None else item.base_end_seq + 1)
    return (RequestSummary(state.next_memory_id, start, end, item.base_memory_id, item.base_end_seq, 1,
                           config.prompt_version, config.model),)


def _as_replay(command: Command) -> Command:
    return ReplayRequest(**vars(command)) if type(command) is RequestSummary else command


def _apply(state: WindowState, commands: tuple[Command, ...], now: float, config: WindowConfig) -> WindowState:
    for command in commands:
        state = evolve(state, command, now, config)
    return state


def decide(state: WindowState, observed: Observed, now: float, config: WindowConfig) -> tuple[Command, ...]:
    """Commands for one input, given the state BEFORE it (so redelivery is recognisable)."""
    return _decide(state, evolve(state, observed, now, config), observed, now, config)


def _decide(state: WindowState, current: WindowState, observed: Observed, now: float, config: WindowConfig
            ) -> tuple[Command, ...]:
    """`decide`, with `current` = the state after `observed`."""
    if isinstance(observed, Rederive):
        return () if observed.erasure_id == state.last_rederive else _rederive(current, observed, config)
    commands = _sweep(current, now, config)
    is_new_round_end = (isinstance(observed, MessageSaved) and observed.seq > state.last_seq
                        and observed.role in config.trigger_roles)
    if is_new_round_end and observed.historic:
        commands += _replay_trigger(_apply(current, commands, now, config), observed.seq, config)
        commands = tuple(_as_replay(c) for c in commands)
    elif is_new_round_end:
        applied = _apply(current, commands, now, config)
        if _chains(applied, now):
            # The backlog rule: the seed would skip this round end (a summary is in flight);
            # the replay's stride decides instead, so a burst and a replay ask for one chain.
            commands += tuple(_as_replay(c) for c in _replay_trigger(applied, observed.seq, config))
        else:
            commands += _trigger(applied, observed.seq, now, config)
    elif isinstance(observed, (SummaryDone, SummaryGaveUp, Tick)) or commands:
        commands += _catch_up(_apply(current, commands, now, config), now, config)
    return commands


def step(state: WindowState, observed: Observed, now: float, config: WindowConfig
         ) -> tuple[WindowState, tuple[Command, ...]]:
    """The one call per event: new state plus the commands to emit, in order."""
    current = evolve(state, observed, now, config)
    commands = _decide(state, current, observed, now, config)
    return _apply(current, commands, now, config), commands
