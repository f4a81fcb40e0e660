"""The connector seam between the scheduler and offload tiers."""
