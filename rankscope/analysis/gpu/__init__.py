"""Device-side analyses at the depth of Holistic Trace Analysis: kernels, launches, idle time, queues,
memory copies. Imports the analysis core and the model only."""
