"""CLI verbs, one module each (see rankscope.cli.VERBS)."""
