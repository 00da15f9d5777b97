"""Traffic for `dwdp size`: who arrives when, with how many input and output tokens (pure, numpy).

Two sources, one result (`Arrivals`: arrival time, ISL, OSL per request, sorted by time):
- generated: an open loop at `rate` requests/s (Poisson: exponential gaps) or a closed loop of `concurrency`
  users (each sends its next request when its previous one finished; the simulator draws those arrivals, so here
  only the lengths are drawn; `requests` stops the loop after that many prompts, as a benchmark client does), ISL and OSL each `fixed`, `uniform_ratio` (uniform in [ratio x mean, mean], the
  paper's "ratio 0.8") or `normal` (coefficient of variation `cv`), seeded;
- a trace file in the Mooncake format (kvcache-ai/Mooncake `FAST25-release/README.md` @ 40ea55f8): one JSON object
  per line with `timestamp` (ms since the trace start), `input_length`, `output_length` (other keys, e.g.
  `hash_ids`, are ignored). `write_trace` writes the same format (a generated workload can be replayed).

Every refusal is a ConfigError naming the argument (or trace file and line) and what was expected.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..byte_units import fmt_bytes
from ..spec.schema import ConfigError

DISTS = ("fixed", "uniform_ratio", "normal")
#: bounds of what a user may ask (beyond them no simulation is meaningful on one machine in seconds)
MAX_LEN = 1 << 20
MAX_REQUESTS = 200_000
MAX_TRACE_BYTES = 64 << 20
#: requests drawn per closed-loop user per second of duration (a request served in under 50 ms would run out)
CLOSED_PER_USER_S = 20


@dataclass(frozen=True)
class LengthDist:
    """A token-length distribution: mean, shape (DISTS) and its parameter."""

    mean: int
    dist: str = "fixed"
    ratio: float = 0.8  # uniform_ratio: uniform in [ratio * mean, mean]
    cv: float = 0.0  # normal: coefficient of variation

    def check(self, arg: str) -> None:
        if not 1 <= self.mean <= MAX_LEN:
            raise ConfigError(None, arg, f"expected a token count in [1, {MAX_LEN:,}], got {self.mean}")
        if self.dist not in DISTS:
            raise ConfigError(None, f"{arg}-dist", f"expected one of {', '.join(DISTS)}, got {self.dist!r}")
        if not 0 < self.ratio <= 1:
            raise ConfigError(None, f"{arg}-ratio", f"expected a number in (0, 1], got {self.ratio}")
        if not 0 <= self.cv < 1 or not math.isfinite(self.cv):
            raise ConfigError(None, f"{arg}-cv", f"expected a number in [0, 1), got {self.cv}")

    def draw(self, rng: np.random.Generator, n: int) -> np.ndarray:
        if self.dist == "fixed":
            return np.full(n, self.mean, dtype=np.int64)
        if self.dist == "uniform_ratio":
            lo = max(1, math.ceil(self.ratio * self.mean))
            return rng.integers(lo, self.mean, size=n, endpoint=True, dtype=np.int64)
        x = rng.normal(self.mean, self.cv * self.mean, size=n)
        return np.clip(np.rint(x), 1, MAX_LEN).astype(np.int64)


@dataclass(frozen=True)
class Traffic:
    """What `dwdp size` serves: an open loop (rate) or a closed loop (concurrency) for duration_s, or a trace."""

    isl: LengthDist
    osl: LengthDist
    rate: float | None = None  # requests/s (Poisson arrivals)
    concurrency: int | None = None  # users, each with one request in flight
    duration_s: float = 600.0
    seed: int = 0
    #: closed loop only: the benchmark client's prompt count (the loop stops after issuing it, as a serving
    #: benchmark's num_prompts does); None: as many as the duration allows (CLOSED_PER_USER_S per user per second)
    requests: int | None = None

    def check(self) -> None:
        if (self.rate is None) == (self.concurrency is None):
            raise ConfigError(None, "--rate", "give exactly one of --rate (requests/s), --concurrency (users) or "
                                              "--trace (a Mooncake-format JSONL file)")
        if self.rate is not None and not (math.isfinite(self.rate) and 0 < self.rate <= 1e5):
            raise ConfigError(None, "--rate", f"expected requests per second in (0, 100000], got {self.rate}")
        if self.concurrency is not None and not 1 <= self.concurrency <= 100_000:
            raise ConfigError(None, "--concurrency", f"expected users in [1, 100000], got {self.concurrency}")
        if not (math.isfinite(self.duration_s) and 1 <= self.duration_s <= 86_400):
            raise ConfigError(None, "--duration", f"expected seconds in [1, 86400], got {self.duration_s}")
        if self.requests is not None and (self.concurrency is None or not 1 <= self.requests <= MAX_REQUESTS):
            raise ConfigError(None, "requests", f"expected a prompt count in [1, {MAX_REQUESTS:,}] with "
                                                  f"a closed loop (--concurrency), got {self.requests}")
        self.isl.check("--isl")
        self.osl.check("--osl")
        if self.rate is not None and self.rate * self.duration_s > MAX_REQUESTS:
            raise ConfigError(None, "--duration", f"--rate x --duration is {self.rate * self.duration_s:,.0f} "
                                                  f"requests; expected at most {MAX_REQUESTS:,} (shorten --duration)")

    def label(self) -> str:
        def d(x: LengthDist) -> str:
            return {"fixed": f"{x.mean}", "uniform_ratio": f"U[{x.ratio:g}x,1x] {x.mean}",
                    "normal": f"N({x.mean}, cv {x.cv:g})"}[x.dist]
        load = f"{self.rate:g} req/s Poisson" if self.rate is not None else f"{self.concurrency} concurrent users"
        return f"{load}, ISL {d(self.isl)}, OSL {d(self.osl)}, {self.duration_s:g} s, seed {self.seed}"


@dataclass(frozen=True)
class Arrivals:
    """Requests sorted by arrival: time (s; NaN in a closed loop: the simulator sets it), ISL, OSL.
    closed_users: the closed loop's users (0 for an open loop or a trace)."""

    t_s: np.ndarray
    isl: np.ndarray
    osl: np.ndarray
    label: str
    closed_users: int = 0
    closed_duration_s: float = 0.0  # a closed loop issues no request after it

    def __len__(self) -> int:
        return int(self.isl.size)

    @property
    def duration_s(self) -> float:
        """The traffic's span: the last arrival (open loop, trace) or the closed loop's duration."""
        if self.closed_users:
            return self.closed_duration_s
        return float(self.t_s[-1]) if len(self) else 0.0


def generate(t: Traffic) -> Arrivals:
    """The seeded requests of `t` (checked first). Closed loop: rate x duration is unknown, so lengths for
    CLOSED_PER_USER_S requests per user per second are drawn (at most MAX_REQUESTS; the simulator issues none
    after duration_s)."""
    t.check()
    rng = np.random.default_rng(t.seed)
    if t.rate is not None:
        return _open_loop(t, rng)
    n = t.requests or min(MAX_REQUESTS, int(t.concurrency * max(1.0, t.duration_s) * CLOSED_PER_USER_S))
    return Arrivals(np.full(n, np.nan), t.isl.draw(rng, n), t.osl.draw(rng, n), t.label(),
                    closed_users=t.concurrency, closed_duration_s=t.duration_s)


def _open_loop(t: Traffic, rng: np.random.Generator) -> Arrivals:
    """Poisson arrivals in [0, duration_s] (the first one even when it falls after the window) and their lengths.

    The first ceil(rate x duration) gaps come from `rng`, then the lengths of those inside the window (the draws
    this function always made, so a run whose first draws pass the window keeps its requests). A Poisson count
    exceeds its mean about half the time, so when the last of them is still inside the window further gaps (and
    their lengths) are drawn from a second generator, default_rng([seed, 1]), until the window is passed or
    MAX_REQUESTS arrivals are drawn; the first requests stay the same either way."""
    n = max(1, int(np.ceil(t.rate * t.duration_s)))
    times = np.cumsum(rng.exponential(1.0 / t.rate, size=n))
    n_in = max(1, int(np.searchsorted(times, t.duration_s, side="right")))  # times are sorted: a prefix is inside
    times = times[:n_in]
    isl, osl = t.isl.draw(rng, n_in), t.osl.draw(rng, n_in)
    if n_in < n or times[-1] > t.duration_s or n_in >= MAX_REQUESTS:
        return Arrivals(times, isl, osl, t.label())
    more = np.random.default_rng([t.seed, 1])
    chunk = max(16, int(np.ceil(4.0 * math.sqrt(n))))  # a few standard deviations of the count per draw
    extra, last = [], float(times[-1])
    while last <= t.duration_s and n_in + sum(e.size for e in extra) < MAX_REQUESTS:
        more_t = last + np.cumsum(more.exponential(1.0 / t.rate, size=chunk))
        inside = more_t[:int(np.searchsorted(more_t, t.duration_s, side="right"))]
        extra.append(inside)
        last = float(more_t[-1]) if inside.size == chunk else math.inf  # inf: this chunk passed the window
    extra_t = np.concatenate(extra)[:MAX_REQUESTS - n_in]
    m = int(extra_t.size)
    return Arrivals(np.concatenate([times, extra_t]), np.concatenate([isl, t.isl.draw(more, m)]),
                    np.concatenate([osl, t.osl.draw(more, m)]), t.label())


def read_trace(path: str | Path) -> Arrivals:
    """A Mooncake-format JSONL trace (module docstring); refusals name the file, line and key."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_TRACE_BYTES:
            raise ConfigError(str(p), "", f"a trace of at most {fmt_bytes(MAX_TRACE_BYTES, 'MiB', digits=0)}, got {fmt_bytes(size, 'MiB', digits=0)}")
        text = p.read_text(encoding="utf-8")
    except OSError as e:
        raise ConfigError(None, "--trace", f"a readable JSONL file, got {str(path)!r} ({e.strerror or e})") from None
    except UnicodeDecodeError as e:
        raise ConfigError(str(p), "", f"UTF-8 JSONL text (byte {e.start} is not UTF-8)") from None
    rows = []
    for i, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        try:
            d = json.loads(line)
        except ValueError as e:
            raise ConfigError(f"{p}:{i}", "", f"one JSON object per line ({e})") from None
        except RecursionError:  # a line nested deeper than the JSON parser recurses
            raise ConfigError(f"{p}:{i}", "", "one flat JSON object per line (nested too deeply to read)") from None
        if not isinstance(d, dict):
            raise ConfigError(f"{p}:{i}", "", "a JSON object with timestamp, input_length, output_length")
        vals = []
        for key, lo, hi in (("timestamp", 0, 1e12), ("input_length", 1, MAX_LEN), ("output_length", 1, MAX_LEN)):
            v = d.get(key)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or not lo <= v <= hi:
                raise ConfigError(f"{p}:{i}", key, f"a number in [{lo:g}, {hi:g}], got {v!r}")
            if key != "timestamp" and v != int(v):  # token counts are whole
                raise ConfigError(f"{p}:{i}", key, f"a whole number of tokens, got {v!r}")
            vals.append(v)
        rows.append(vals)
        if len(rows) > MAX_REQUESTS:
            raise ConfigError(str(p), "", f"at most {MAX_REQUESTS:,} requests")
    if not rows:
        raise ConfigError(str(p), "", "at least one request line (timestamp, input_length, output_length)")
    a = np.array(rows, float)
    order = np.argsort(a[:, 0], kind="stable")
    a = a[order]
    t0 = a[0, 0]
    return Arrivals((a[:, 0] - t0) / 1000.0, a[:, 1].astype(np.int64), a[:, 2].astype(np.int64),
                    f"trace {p.name}: {len(a)} requests over {(a[-1, 0] - t0) / 1000.0:.1f} s")


def write_trace(arrivals: Arrivals, path: str | Path) -> None:
    """`arrivals` as a Mooncake-format JSONL trace (timestamps in whole ms, as the format has them)."""
    if arrivals.closed_users:
        raise ConfigError(None, "--concurrency", "a closed loop has no arrival times to write; use --rate")
    lines = [json.dumps({"timestamp": int(round(t * 1000.0)), "input_length": int(i), "output_length": int(o)})
             for t, i, o in zip(arrivals.t_s, arrivals.isl, arrivals.osl)]
    Path(path).write_text("\n".join(lines) + "\n", encoding="utf-8")
