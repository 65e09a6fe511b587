"""Who the others wait for and why: the straggler verdict and its cause (rules, input work, CPU samples),
the likely straggler below the bar, who-waits-for-whom lanes, advice. Reads the other analyses' results."""
