"""Outputs that other tools define: HTA's temporal breakdown and overlap, msprof-analyze's Ascend cluster
files. Each follows its reference tool value by value; the tests compare them with the tool."""
