"""Planning runs: the SLOs a run is judged by (`slo`), the max-sustainable-rate search
(`capacity_search`) and sweeps over option lists (`sweep`)."""
