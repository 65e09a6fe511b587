"""The demo: a real data-parallel training job, profiled on every rank, then analyzed."""
