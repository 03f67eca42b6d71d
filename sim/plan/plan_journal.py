"""The journal of a plan: each candidate's search result, appended as soon as it finishes.

`OUT/candidates.jsonl` holds one JSON object per searched candidate: `key` (a hash of everything
that decides the search: the candidate, the trace's bytes, the SLO, the search settings, the seed
and the engine overrides) and `result` (what `sim.plan.planner.search_candidate` returned, before
costs: costs depend only on the target rate and price assumptions, so they are recomputed). It is
the sweep's journal format (`sim.plan.results.ResultsJournal`): an interrupted plan keeps every
candidate searched so far, and `plan --resume` skips them. A candidate that failed with an error is
not journaled, so it is searched again.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from sim.files import file_sha256
from sim.plan.results import ResultsJournal

JOURNAL_FILE = "candidates.jsonl"


class PlanJournal:
    """Finished candidate searches of one plan folder (see the module docstring)."""

    def __init__(self, out_dir: Path, *, resume: bool) -> None:
        self.journal = ResultsJournal(Path(out_dir) / JOURNAL_FILE)
        if resume:
            self.journal.drop_partial_line()
            self.done = {k: r["result"] for k, r in self.journal.read().items() if isinstance(r.get("result"), dict)}
        else:
            self.journal.start_fresh()
            self.done = {}
        self._trace_sha: dict[str, str] = {}

    @property
    def path(self) -> Path:
        return self.journal.path

    def key(self, task: dict[str, Any]) -> str:
        """16 hex digits of sha256 over the task's fields, the trace by content (not by path)."""
        trace = task["trace"]
        if trace not in self._trace_sha:
            self._trace_sha[trace] = file_sha256(trace)
        fields = {k: v for k, v in task.items() if k not in ("position", "trace")}
        fields["trace_sha256"] = self._trace_sha[trace]
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"), default=str)
        return hashlib.sha256(blob.encode()).hexdigest()[:16]

    def finished(self, task: dict[str, Any]) -> dict[str, Any] | None:
        return self.done.get(self.key(task))

    def record(self, task: dict[str, Any], result: dict[str, Any]) -> None:
        if result.get("error") is None:
            self.journal.append({"key": self.key(task), "result": result})
