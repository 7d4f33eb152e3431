"""A mkdocs hook: the Sphinx roles EchoMQ's docstrings use (``:class:`~echomq.Queue```,
``:meth:`stop```, …) rendered as code, linked where the name is an object of this reference.

mkdocstrings renders a docstring as Markdown, where a role is left as text (``:class:``
before the code). This turns each into an autorefs cross-reference marked optional: autorefs
links it when the reference documents the object and leaves plain code (no warning)
otherwise, e.g. a method named relative to its class.
"""

from __future__ import annotations

import re
from typing import Any

_ROLE = re.compile(r":(?:class|func|meth|attr|mod|exc|data|obj):<code>(~?)([\w.]+)(\(\))?</code>")


def _reference(match: re.Match[str]) -> str:
    tilde, target, call = match.group(1), match.group(2), match.group(3) or ""
    shown = target.rsplit(".", 1)[-1] if tilde else target
    if "." not in target:  # relative to the class or module: nothing to resolve it against
        return f"<code>{shown}{call}</code>"
    return f'<autoref identifier="{target}" optional><code>{shown}{call}</code></autoref>'


def on_page_content(html: str, **kwargs: Any) -> str:
    return _ROLE.sub(_reference, html)
