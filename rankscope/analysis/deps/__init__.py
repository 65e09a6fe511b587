"""Who waits for whom: the critical path of a step, from dependencies, within a rank and across ranks.

Pattern: a step is a DAG. Nodes are the start and end points of operators, runtime calls, device
operations and communication spans; edges are the dependencies HTA's critical path graph uses
(CPU op nesting, launch -> kernel, kernel -> kernel on a stream, stream / event / device syncs) plus,
across ranks, collectives matched by (group, sequence) and point-to-point pairs. The step's
critical path is the longest path in that DAG.

Algorithm: the graph is a set of chains (one per host thread, one per stream or executor thread)
joined by cross edges, so the longest path is computed chain-wise with a cumulative max (closed
form of ``d[i] = max(d[i-1] + w[i], in[i])``) and the cross edges are relaxed until nothing changes
(Bellman-Ford over chains; a handful of rounds per collective level). Modules:

- ``events``: one rank's events as numpy columns (kinds, launches by correlation, syncs);
- ``cpu`` / ``gpu``: the chains and edges of one rank (HTA 0.5.0's rules, ``hta=True``; or the
  time-faithful variant used across ranks, where waits weigh nothing and gaps are the rank's own time);
- ``graph``: the graph of one rank in a window; ``path``: the longest path;
- ``join``: the ranks of a step joined by collectives and p2p pairs (``adapter``: where the matched
  collectives come from); ``whatif``: the step if one rank ran at the other ranks' median;
- ``chain``: the path as segments {rank, kind, name, start, end, group, seq};
- ``analysis``: the registered ``critical_path`` analysis (rank_part / combine / run).
"""
