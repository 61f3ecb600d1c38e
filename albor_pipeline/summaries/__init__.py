"""Each stage's summary (its facts as a typed `Report`, written once into its manifest) and how
the provenance page and the dataset card render it: what a stage's work returns and what
`stats` and `provenance` read back, shared so that stages never import each other."""
