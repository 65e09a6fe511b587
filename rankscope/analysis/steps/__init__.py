"""Where each step's time and memory went on every rank: the breakdown, the iteration trajectory, the
captured windows, operator statistics and memory. Imports the analysis core and the model only."""
