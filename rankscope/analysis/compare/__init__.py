"""Run against run: what changed per rank, step, operator, kernel and collective (``diff``), and what
explains the step-time change (``cause``)."""
