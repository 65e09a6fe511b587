"""What moved between ranks: collectives matched across ranks, the communication matrix, slow links and
groups, RPC calls. Imports the analysis core, clock alignment and the model only."""
