"""rankscope.collect.worldref: which defaults it replaces, and that it leaves a process without a group alone."""
from __future__ import annotations

from rankscope.collect import worldref


class Group:  # stands in for ProcessGroup: only its type is read
    pass


def test_only_group_defaults_become_none():
    g = Group()

    def pos(t, src=0, group=g):
        return group

    def kw(t, *, op="sum", group=g):
        return group

    def plain(t, group=None, n=3):
        return group

    assert worldref._replace([pos, kw, plain, Group, 7], Group) == 2
    assert pos.__defaults__ == (0, None) and kw.__kwdefaults__ == {"op": "sum", "group": None}
    assert plain.__defaults__ == (None, 3)
    assert worldref._replace([pos, kw], Group) == 0  # nothing left to replace


def test_without_a_process_group_nothing_is_touched():
    import torch.distributed as dist

    assert not dist.is_initialized()
    assert worldref.release() == 0
