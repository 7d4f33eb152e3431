"""The reliability suite (issue 6): kill storms, frozen workers, server crashes, poison jobs,
outages and a stateful model, each ending in counted figures. See docs/reliability.md."""
