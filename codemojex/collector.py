"""Python's cyclic garbage collector, tuned for the long-running roles (web and worker).

The defaults (700, 10, 10) are made for short scripts. A web process holding a crowd of
connections keeps 60,000–160,000 tracked objects alive, and under 200 mashers (bench_door,
server on one core) its oldest generation was collected every few seconds in 32–102 ms
pauses, with the middle one up to 42 ms: each pause stalls every request the process
holds, the honest players' among them. Almost everything a
request allocates is freed by reference counting before a collection would see it, so
collecting less often costs a little memory and saves CPU; the rare cycles still go.
"""

from __future__ import annotations

import gc

# Allocations (net of deallocations) before the youngest generation is collected, and how
# many collections of each generation before the next one up: in the same bench_door row
# (14 s) 20,000 / 20 / 100 left three collections over 5 ms, all of the youngest
# generation, against 33 before (15 of the middle one, up to 42 ms; 3 of the oldest).
THRESHOLDS = (20_000, 20, 100)


def quiet_collector() -> None:
    """Freeze what is alive now (the imported stack, the app) out of the collector's sight
    and raise its thresholds, for a process about to serve."""
    gc.freeze()
    gc.set_threshold(*THRESHOLDS)
