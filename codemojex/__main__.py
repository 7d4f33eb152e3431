"""``python -m codemojex``: the same as the ``codemojex`` command."""

from __future__ import annotations

from codemojex.cli import main

if __name__ == "__main__":
    main()
