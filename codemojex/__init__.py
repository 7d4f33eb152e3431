"""Codemojex: the game — rules, submission, scoring, rounds, the durable SQL floor, the CLI."""
