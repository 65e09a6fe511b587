"""Ascend readers: the torch_npu profiler directory in its text (``torch_npu``, ``files``, ``overlap``) and
DB (``db``, ``db_trace``) export forms, and the MindInsight-era MindSpore cluster layout (``mindinsight``)."""
