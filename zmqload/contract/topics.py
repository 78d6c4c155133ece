"""Topics (--topics, --topic-weights, --subscribe): which topic each seq carries (`pattern[seq mod
len(pattern)]`) and which seqs each consumer subscribed to. One pure rule for the producer, the
consumer, the reconciliation, the queue depth and the report (docs/RECORDS.md)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ..errors import ConfigError

MAX_TOPICS = 1000
MAX_WEIGHT = 1000
MAX_PERIOD = 10_000
"""The most slots in the pattern (the weights' sum): the report's Spark holds it as a literal array."""
WARMUP_CHAR = "~"
"""The warm-up messages' topic is this character repeated to the topics' width (no topic's name):
zmqload's consumers subscribe to it beside their topics; a subscriber of one topic never sees them."""


def names(n: int) -> list[str]:
    """The names of n topics, all of one width."""
    digits = len(str(max(n - 1, 0)))
    return [f"t{i:0{digits}d}" for i in range(n)]


def parse_weights(text: str, n: int) -> list[int]:
    """--topic-weights "5,3,1" for n topics -> [5, 3, 1]; ConfigError otherwise."""
    accepted = (
        f"{n} whole numbers from 1 to {MAX_WEIGHT} separated by commas, one per topic, "
        f"summing to at most {MAX_PERIOD}"
    )
    try:
        weights = [int(part) for part in text.split(",")]
    except ValueError:
        raise ConfigError("--topic-weights", f"got {text!r}; accepted: {accepted}") from None
    if (
        len(weights) != n
        or not all(1 <= w <= MAX_WEIGHT for w in weights)
        or sum(weights) > MAX_PERIOD
    ):
        raise ConfigError("--topic-weights", f"got {text!r} for --topics {n}; accepted: {accepted}")
    return weights


def parse_subscribe(text: str, topic_names: list[str], consumers: int) -> list[list[int]]:
    """--subscribe "P,P" (every consumer) or "P,P;P" (one group per consumer, in order) -> each
    consumer's topic indices; ConfigError for a prefix matching no topic or a wrong group count."""
    accepted = (
        f"topic name prefixes separated by commas (the topics are {topic_names[0]}..{topic_names[-1]}), "
        f"for every consumer, or one such list per consumer separated by ';' ({consumers} lists)"
    )
    groups = text.split(";")
    if len(groups) > 1 and len(groups) != consumers:
        raise ConfigError(
            "--subscribe",
            f"got {text!r}: {len(groups)} lists for {consumers} consumers; accepted: {accepted}",
        )
    out = []
    for group in groups:
        chosen: set[int] = set()
        for prefix in (p.strip() for p in group.split(",")):
            hits = (
                [i for i, name in enumerate(topic_names) if name.startswith(prefix)]
                if prefix
                else []
            )
            if not hits:
                raise ConfigError(
                    "--subscribe",
                    f"got {text!r}: {prefix!r} matches no topic; accepted: {accepted}",
                )
            chosen.update(hits)
        out.append(sorted(chosen))
    return out * consumers if len(groups) == 1 else out


@dataclass(frozen=True)
class Topics:
    """A run's topics and each consumer's subscription."""

    names: tuple[str, ...]
    pattern: np.ndarray  # topic index per slot; topic(seq) = pattern[seq % len]
    subscribed: tuple[tuple[int, ...], ...]  # per consumer: its topic indices

    @classmethod
    def of(
        cls, topics: int, weights: str | None, subscribe: str | None, consumers: int
    ) -> Topics | None:
        """From the options' values (checked: Workload does); None without topics."""
        if not topics:
            return None
        topic_names = names(topics)
        w = parse_weights(weights, topics) if weights else [1] * topics
        subs = (
            parse_subscribe(subscribe, topic_names, consumers)
            if subscribe
            else [list(range(topics))] * consumers
        )
        pattern = np.repeat(np.arange(topics, dtype=np.int64), w)
        return cls(tuple(topic_names), pattern, tuple(tuple(s) for s in subs))

    @property
    def width(self) -> int:
        """Bytes of a topic at the start of the first frame."""
        return len(self.names[0])

    @property
    def warmup(self) -> bytes:
        return (WARMUP_CHAR * self.width).encode()

    def table(self) -> bytes:
        """What the engine's Sender copies from: the pattern's topic names, one slot after another."""
        return b"".join(self.names[i].encode() for i in self.pattern)

    def topic_of(self, seq: np.ndarray) -> np.ndarray:
        """The topic index of each seq (the rule)."""
        return self.pattern[np.asarray(seq, np.int64) % len(self.pattern)]

    def expected(self, consumer: int, lo_byte: int, hi_byte: int) -> np.ndarray:
        """The packed map (np.packbits order) of seqs [8 lo_byte, 8 hi_byte) whose topic `consumer`
        subscribed to: its expected set, a piece at a time (one period of the pattern, repeated)."""
        period = len(self.pattern)
        wanted = np.isin(self.pattern, self.subscribed[consumer])
        if wanted.all():
            return np.full(hi_byte - lo_byte, 0xFF, np.uint8)
        one = np.packbits(
            np.tile(wanted, 8)
        )  # 8 periods: whole bytes, repeating every `period` bytes
        start = lo_byte % period
        return np.resize(np.roll(one, -start), hi_byte - lo_byte)

    def count(self, packed: np.ndarray, offset: int) -> np.ndarray:
        """Per topic, the set bits of a packed map piece whose first bit is seq `offset`."""
        bits = np.unpackbits(packed)
        period = len(self.pattern)
        phase = offset % period
        pad_front = phase
        total = pad_front + len(bits)
        padded = np.zeros(-(-total // period) * period, np.uint8)
        padded[pad_front:total] = bits
        per_slot = padded.reshape(-1, period).sum(axis=0, dtype=np.int64)
        return np.bincount(self.pattern, weights=per_slot, minlength=len(self.names)).astype(
            np.int64
        )
