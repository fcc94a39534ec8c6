"""Two override writers at once, made to happen on cue: both shared override stores (Redis, the Kubernetes
ConfigMap) must re-apply a change whose read another replica's write overtook, and their tests stage that race
the same way."""

from __future__ import annotations


def interleaved(base: type) -> type:
    """A subclass of the override store `base` that runs its `then` (another replica's write, set by the test)
    between its first read and its write; `runs`: how many times it applied its change (2: refused once, then
    applied on the newer document)."""

    class Interleaved(base):
        then = None
        runs = 0

        def update(self, mutate, at):
            def racing(doc):
                out = mutate(doc)
                self.runs += 1
                if self.runs == 1:
                    self.then()
                return out

            return super().update(racing, at)

    return Interleaved
