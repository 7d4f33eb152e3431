"""Mutation testing: mutmut over the Python core (run.py), a table of Lua mutants (lua_mutants.py)."""
