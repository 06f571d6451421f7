"""Per-conversation rolling chunk trigger (seed 003): a pure fold, clock passed in."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import Any, Union


@dataclass(frozen=True)
class ChunkConfig:
    # Seed 003: summarize once MORE than 30 messages are unsummarized, 20 oldest at a time.
    summarization_threshold: int = 30
    batch_size: int = 20
    # A request with no result after this long is re-issued (worker crash, lost call).
    request_timeout_s: float = 120.0
    # Attempts per range (failures and timeouts both count); then the range is skipped.
    max_attempts: int = 5
    failure_backoff_s: float = 30.0
    max_backoff_s: float = 3600.0
    # Ranges requested ahead of the one in flight while a backlog makes them due (0: one request
    # at a time, seed 003's chain). A burst folded before any result comes back asks for the next
    # ranges without waiting a round trip through the stage and the processor for each one; the
    # stage still answers a conversation's ranges one after another, in order (streams/facts/stage.py).
    max_ahead: int = 0

    def __post_init__(self) -> None:
        # The batch must already exist when the trigger fires (unsummarized >= threshold + 1).
        if self.summarization_threshold < 0 or not 1 <= self.batch_size <= self.summarization_threshold + 1:
            raise ValueError("need 1 <= batch_size <= summarization_threshold + 1")
        if self.max_attempts < 1 or self.request_timeout_s <= 0:
            raise ValueError("max_attempts must be >= 1 and request_timeout_s > 0")
        if self.max_ahead < 0:
            raise ValueError("max_ahead must be >= 0")

    def backoff(self, failures: int) -> float:
        """Wait after the `failures`-th failed attempt of one range: doubling, capped."""
        return min(self.failure_backoff_s * 2 ** min(failures - 1, 32), self.max_backoff_s)


@dataclass(frozen=True)
class MessageSaved:
    seq: int


@dataclass(frozen=True)
class ChunkDone:
    start_seq: int
    end_seq_exclusive: int


@dataclass(frozen=True)
class ChunkFailed:
    start_seq: int
    end_seq_exclusive: int
    error: str
    attempt: int | None = None  # when given, a failure of a replaced attempt is ignored


@dataclass(frozen=True)
class Tick:
    """A timer fired: timeouts and backed-off retries are checked."""


Observed = Union[MessageSaved, ChunkDone, ChunkFailed, Tick]


@dataclass(frozen=True)
class RequestChunk:
    """Summarize + extract seqs [start_seq, end_seq_exclusive): `end` is EXCLUSIVE."""

    start_seq: int
    end_seq_exclusive: int
    attempt: int


@dataclass(frozen=True)
class SkipChunk:
    """A range that failed `attempts` times is given up so later messages still get chunked."""

    start_seq: int
    end_seq_exclusive: int
    attempts: int
    error: str


Command = Union[RequestChunk, SkipChunk]


@dataclass(frozen=True)
class ChunkInFlight:
    start_seq: int
    end_seq_exclusive: int
    attempt: int
    requested_at: float


@dataclass(frozen=True)
class ChunkState:
    last_seq: int = -1
    # Seed 003's last_summarized_end: every seq below it is summarized (or skipped).
    last_summarized_end: int = 0
    in_flight: ChunkInFlight | None = None
    failed_attempts: int = 0  # failed attempts of the range starting at last_summarized_end
    not_before: float = 0.0
    last_error: str | None = None
    requests: int = 0
    completions: int = 0
    failures: int = 0
    reissues: int = 0
    skipped: int = 0
    # Ranges requested ahead of the one in flight (`ChunkConfig.max_ahead`): every range from
    # the in-flight one's end up to `requested_end` (exclusive) was asked for once; `done_ahead` and
    # `failed_ahead` hold the starts of those whose result came before their turn (applied, or
    # counted as a failed first attempt, when the range becomes the one in flight).
    requested_end: int = 0
    done_ahead: tuple[int, ...] = ()
    failed_ahead: tuple[int, ...] = ()  # starts only: an error text would have to be sealed

    @property
    def message_count(self) -> int:
        """Messages written, by position: highest seq + 1 (gaps count as written)."""
        return self.last_seq + 1

    @property
    def unsummarized(self) -> int:
        return self.message_count - self.last_summarized_end

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> ChunkState:
        """Missing keys take their defaults, so older stored states still load."""
        known = {k: v for k, v in data.items() if k in cls.__dataclass_fields__}
        if known.get("in_flight") is not None:
            known["in_flight"] = ChunkInFlight(**known["in_flight"])
        if "done_ahead" in known:
            known["done_ahead"] = tuple(known["done_ahead"])
        if "failed_ahead" in known:
            known["failed_ahead"] = tuple(known["failed_ahead"])
        return cls(**known)


def next_range(state: ChunkState, config: ChunkConfig) -> tuple[int, int] | None:
    """Seed 003: [last_summarized_end, last_summarized_end + BATCH_SIZE) once unsummarized > threshold."""
    if state.unsummarized <= config.summarization_threshold:
        return None
    return state.last_summarized_end, state.last_summarized_end + config.batch_size


# The last error of a range whose first attempt failed while it was asked for ahead (its
# chunk.failed event in the log has the error itself).
FAILED_AHEAD = "the attempt asked for ahead failed (see its chunk.failed)"


def _advance(state: ChunkState, end: int, now: float, config: ChunkConfig, **counters: int
             ) -> tuple[ChunkState, tuple[Command, ...]]:
    """Summarized up to `end`; then past the ranges ahead already answered, and the next range
    asked for ahead becomes the one in flight (its first attempt, already sent: the timeout counts
    from now, as the wait for it starts now)."""
    state = replace(state, last_summarized_end=end, in_flight=None, failed_attempts=0,
                    not_before=0.0, last_error=None, **counters)
    done = set(state.done_ahead)
    while state.last_summarized_end in done:
        done.discard(state.last_summarized_end)
        state = replace(state, last_summarized_end=state.last_summarized_end + config.batch_size,
                        completions=state.completions + 1)
    start = state.last_summarized_end
    state = replace(state, done_ahead=tuple(sorted(s for s in done if s > start)),
                    failed_ahead=tuple(s for s in state.failed_ahead if s >= start))
    if start >= state.requested_end:
        return state, ()
    state = replace(state, in_flight=ChunkInFlight(start, start + config.batch_size, 1, now))
    if start in state.failed_ahead:  # its first attempt failed while it waited its turn
        state = replace(state, failed_ahead=tuple(s for s in state.failed_ahead if s != start))
        return _failed(state, 1, FAILED_AHEAD, now, config)
    return state, ()


def _failed(state: ChunkState, attempt: int, error: str, now: float, config: ChunkConfig
            ) -> tuple[ChunkState, tuple[Command, ...]]:
    """One attempt failed: back off and retry later, or skip the range after the last attempt."""
    state = replace(state, in_flight=None, failures=state.failures + 1, last_error=error)
    if attempt >= config.max_attempts:
        end = state.last_summarized_end + config.batch_size
        skip = SkipChunk(state.last_summarized_end, end, attempt, error)
        state, more = _advance(state, end, now, config, skipped=state.skipped + 1)
        return state, (skip, *more)
    return replace(state, failed_attempts=attempt, not_before=now + config.backoff(attempt)), ()


def _request(state: ChunkState, start: int, end: int, attempt: int, now: float) -> ChunkState:
    fresh = attempt == 1
    return replace(state, in_flight=ChunkInFlight(start, end, attempt, now),
                   requests=state.requests + int(fresh), reissues=state.reissues + int(not fresh))


def _observe(state: ChunkState, item: Observed, now: float, config: ChunkConfig
             ) -> tuple[ChunkState, tuple[Command, ...]]:
    flight = state.in_flight
    if isinstance(item, MessageSaved):
        return replace(state, last_seq=max(state.last_seq, item.seq)), ()
    if isinstance(item, ChunkDone):
        # The next range's result counts whatever attempt produced it (even a late one after a
        # timeout or failure); a range asked for ahead is kept for its turn; anything else is a
        # duplicate or stale.
        if _ahead(state, item.start_seq, item.end_seq_exclusive, config):
            if item.start_seq in state.done_ahead:
                return state, ()
            return replace(state, done_ahead=tuple(sorted((*state.done_ahead, item.start_seq)))), ()
        if item.start_seq != state.last_summarized_end or item.end_seq_exclusive <= item.start_seq:
            return state, ()
        return _advance(state, item.end_seq_exclusive, now, config, completions=state.completions + 1)
    if isinstance(item, ChunkFailed):
        if _ahead(state, item.start_seq, item.end_seq_exclusive, config) and item.attempt in (None, 1):
            if item.start_seq in state.done_ahead or item.start_seq in state.failed_ahead:
                return state, ()
            return replace(state, failed_ahead=(*state.failed_ahead, item.start_seq)), ()
        if flight is None or (item.start_seq, item.end_seq_exclusive) != (
                flight.start_seq, flight.end_seq_exclusive) or item.attempt not in (None, flight.attempt):
            return state, ()
        return _failed(state, flight.attempt, item.error, now, config)
    return state, ()


def _ahead(state: ChunkState, start: int, end: int, config: ChunkConfig) -> bool:
    """[start, end) is a range asked for ahead of the one in flight, not reached yet."""
    first = state.last_summarized_end + config.batch_size
    return (first <= start < state.requested_end and end == start + config.batch_size
            and (start - state.last_summarized_end) % config.batch_size == 0)


def _sweep(state: ChunkState, now: float, config: ChunkConfig) -> tuple[ChunkState, tuple[Command, ...]]:
    """A request that never returned: re-issue the same range, or count it as a failure."""
    flight = state.in_flight
    if flight is None or now - flight.requested_at <= config.request_timeout_s:
        return state, ()
    error = f"no result within {config.request_timeout_s:g}s (attempt {flight.attempt})"
    if flight.attempt < config.max_attempts:
        command = RequestChunk(flight.start_seq, flight.end_seq_exclusive, flight.attempt + 1)
        return _request(state, command.start_seq, command.end_seq_exclusive, command.attempt, now), (command,)
    return _failed(state, flight.attempt, error, now, config)


def _trigger(state: ChunkState, now: float, config: ChunkConfig) -> tuple[ChunkState, tuple[Command, ...]]:
    """One request in flight per conversation, plus up to `max_ahead` ranges asked for ahead
    while they are due; none while backing off after a failure."""
    commands: tuple[Command, ...] = ()
    if state.in_flight is None:
        found = next_range(state, config)
        if found is None or now < state.not_before:
            return state, ()
        command = RequestChunk(found[0], found[1], state.failed_attempts + 1)
        state = _request(state, found[0], found[1], command.attempt, now)
        commands = (command,)
    head_end = state.in_flight.end_seq_exclusive
    start = max(state.requested_end, head_end)
    while (start - head_end) // config.batch_size < config.max_ahead and \
            state.message_count - start > config.summarization_threshold:
        command = RequestChunk(start, start + config.batch_size, 1)
        state = replace(state, requested_end=command.end_seq_exclusive, requests=state.requests + 1)
        commands += (command,)
        start = command.end_seq_exclusive
    return state, commands


def step(state: ChunkState, observed: Observed, now: float, config: ChunkConfig
         ) -> tuple[ChunkState, tuple[Command, ...]]:
    """The one call per input: new state plus the commands to emit, in order.

    A redelivered message (seq <= the highest seen) changes nothing at all. Every other
    input runs the timeout sweep and then the trigger, so a completion that leaves a
    backlog requests the next batch at once and a Tick retries after a backoff.
    """
    if isinstance(observed, MessageSaved) and observed.seq <= state.last_seq:
        return state, ()
    state, observed_commands = _observe(state, observed, now, config)
    state, swept = _sweep(state, now, config)
    state, triggered = _trigger(state, now, config)
    return state, observed_commands + swept + triggered
