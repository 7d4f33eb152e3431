"""``python -m bench.watchers``: one process of the crowd."""

from __future__ import annotations

import sys

from bench.watchers.crowd import main

sys.exit(main())
