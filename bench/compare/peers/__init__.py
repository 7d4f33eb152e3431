"""One driver per peer, each run as ``python -m bench.compare.peers.<peer>`` in that peer's own
venv (EchoMQ's in this project's). Standard library imports only at this level: a peer's venv
has nothing of ours but these files."""
