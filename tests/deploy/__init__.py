"""The deployment as shipped: nginx in front of real web processes, Valkey with a password."""
