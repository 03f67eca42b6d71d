"""A scheduling policy in one file (the docs/contributing.md recipe; tests/test_extension_names.py
drops it into sim/engine/policies/ and runs it): admit new requests only when nothing runs, then
run that batch to its end — Hugging Face `generate()` on a padded batch, written from the public
`Scheduler` API alone. It must give exactly what the built-in `static` policy gives."""

from sim.engine.schedulers import Batch, Scheduler


class DrainFirst(Scheduler):
    name = "drain_first"

    def arrival_may_change_plan(self, state) -> bool:
        return state.n_running == 0  # an arrival matters only to an idle engine

    def waiting_may_be_admitted(self, state) -> bool:
        return False  # nobody joins a running batch

    def plan(self, state) -> Batch:
        if state.n_running:  # every running sequence decodes one token; nothing else can change that
            return Batch([], [], self._grow_decodes(state), stable=True)
        return self._admit_whole_prompts(state)  # the base class's step: whole prompts, first come first served
