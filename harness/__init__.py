"""The process harness that tests/ and bench/ both drive: ``codemojex up`` and web
processes as a user runs them, throwaway PostgreSQL and Valkey Cluster instances, Debian's
nginx with compose's config, and the small socket and SQLite probes around them."""
