"""When a file in a landing prefix is complete: pure functions over what the polls saw.

A file still being written must never land. Two signals say it is done
(``landing:`` in docs/config.md):

* **stability**: the same size and modification time in ``stable_polls``
  consecutive polls (the rule of Hadoop's and Flume's spooling readers, and of
  Beam's own ``MatchContinuously(match_updated_files=True)``, which treats a
  new modification time as a new file);
* **a completion marker**: ``<file><marker_suffix>`` exists (the ``_SUCCESS``
  / ``.done`` convention of Hadoop output committers and transfer tools).

:func:`observe` folds one poll's observation of one path into that path's
:class:`PathState` and says what to do: ``WAIT``, ``LAND`` (hand this version
to the copier), ``KNOWN`` (this version landed already) or ``STALE`` (an
observation older than one already folded in, which a streaming runner may
deliver out of order; it is ignored, so a stale view can only delay a
landing, never cause one). The landing job's streaming gate keeps a
``PathState`` per (source, path) in Beam state; ``--once`` folds its polls
through the same function.
"""

from __future__ import annotations

import dataclasses
import json
from typing import Iterable

WAIT, LAND, KNOWN, STALE = "wait", "land", "known", "stale"

#: A version of a file: (size in bytes, modification time in seconds since the epoch).
Version = tuple[int, float]


@dataclasses.dataclass(frozen=True)
class Observation:
    """One poll's view of one file."""

    poll: float  # the poll's time (its element timestamp), seconds since the epoch
    size: int
    mtime: float
    marker: bool = False  # the completion marker existed at this poll (marker mode only)

    @property
    def version(self) -> Version:
        return self.size, self.mtime


@dataclasses.dataclass(frozen=True)
class PathState:
    """What the gate remembers about one path."""

    last_poll: float = float("-inf")
    version: Version | None = None  # the version the latest polls saw
    polls: int = 0  # consecutive polls that saw ``version``
    landed: Version | None = None  # the latest version handed to the copier by this job

    def to_json(self) -> str:
        """The state as Beam stores it (a string: no pickled objects in the runner's state)."""
        return json.dumps(
            [self.last_poll if self.last_poll != float("-inf") else None, self.version, self.polls, self.landed]
        )

    @staticmethod
    def from_json(text: str | None) -> "PathState":
        if text is None:
            return PathState()
        last_poll, version, polls, landed = json.loads(text)
        return PathState(
            float("-inf") if last_poll is None else last_poll,
            None if version is None else (version[0], version[1]),
            polls,
            None if landed is None else (landed[0], landed[1]),
        )


def observe(
    state: PathState,
    seen: Observation,
    *,
    stable_polls: int,
    marker_mode: bool,
    known: frozenset[Version] | set[Version] = frozenset(),
    min_spacing: float = 0.0,
) -> tuple[PathState, str]:
    """Fold one observation into ``state``; return the new state and the decision.

    ``known``: versions of this path the arrivals log already holds (a
    restarted job reads them from the log, so a committed arrival never lands
    twice). ``min_spacing``: seconds that must separate two listings for the
    second to count as another poll of an unchanged file. A periodic impulse
    that starts late emits the ticks it missed at once, and listings made
    milliseconds apart say nothing about whether a writer has finished; a
    change is always taken, however soon it is seen.
    """
    if seen.poll <= state.last_poll:
        return state, STALE
    if seen.version == state.version:
        if seen.poll - state.last_poll < min_spacing:
            polls, last_poll = state.polls, state.last_poll  # too soon: not another poll
        else:
            polls, last_poll = state.polls + 1, seen.poll
    else:
        polls, last_poll = 1, seen.poll
    state = dataclasses.replace(state, last_poll=last_poll, version=seen.version, polls=polls)
    if seen.version == state.landed or seen.version in known:
        return state, KNOWN
    complete = seen.marker if marker_mode else polls >= stable_polls
    if not complete:
        return state, WAIT
    return dataclasses.replace(state, landed=seen.version), LAND


def stable_versions(
    observations: Iterable[Observation],
    *,
    stable_polls: int,
    marker_mode: bool,
    known: frozenset[Version] | set[Version] = frozenset(),
    min_spacing: float = 0.0,
) -> tuple[list[Version], str, int]:
    """Fold a path's observations in poll order: (versions to land, the decision at the last poll,
    the polls that saw the last version)."""
    state, decision, landed = PathState(), WAIT, []
    for seen in sorted(observations, key=lambda o: o.poll):
        state, decision = observe(
            state, seen, stable_polls=stable_polls, marker_mode=marker_mode, known=known, min_spacing=min_spacing
        )
        if decision == LAND:
            landed.append(seen.version)
    return landed, decision, state.polls


def replaced_versions(state: PathState, known: frozenset[Version] | set[Version], version: Version) -> list[Version]:
    """Versions of this path that landed before ``version``: a file that changed after it landed."""
    earlier = set(known) | ({state.landed} if state.landed is not None else set())
    return sorted(v for v in earlier if v != version)


def is_marker(path: str, marker_suffix: str | None) -> bool:
    """Marker files say another file is complete; they never land themselves."""
    return marker_suffix is not None and path.endswith(marker_suffix)
