"""Real training jobs of other parallelisms for the straggler benchmark (bench/workloads.py) and the e2e tests.

Each job runs under torch.distributed.run (gloo on CPU), profiled with ``rankscope.profile``, and writes
``RUN/truth.json``: which rank was made slow, the cause label a verdict should give, and the job's own
``perf_counter`` timers per step and rank (see :mod:`.common`).

- :mod:`.fsdp`: a small LM under FSDP2 (``fully_shard``); stragglers ``data`` (pure-Python tokenizing in the
  dataset), ``compute`` (extra matmuls in the forward), ``input`` (longer sequences);
- :mod:`.moe`: expert parallelism, ``all_to_all_single`` inside an autograd Function; a skewed top-1 router;
- :mod:`.tp_fsdp`: tensor parallel (DTensor Colwise / Rowwise) on "tp" x FSDP2 on "dp"; a host-side loop;
- :mod:`.pipeline`: ``torch.distributed.pipelining`` (GPipe, 1F1B), one stage holding 2x the layers.

    python -m torch.distributed.run --standalone --nproc-per-node=2 -m rankscope.demo.workloads.fsdp \\
        --run-dir RUN --straggler data --slow-rank 1
"""
