"""``python -m echomq``: the same as the ``echomq`` command."""

from __future__ import annotations

from echomq.cli import main

if __name__ == "__main__":
    main()
