"""Statistics with pictures: distributions, the filter funnel, redactions, near-duplicate
clusters, FIM share and sequence fill, as `stats/stats.json` and PNG charts."""
