"""Artifacts on disk: atomic writes, JSON and Parquet with their version stamps, file hashes, and
one versioned reader per artifact kind (with the migrations of older versions). Below run/ and
stats/: both write and read through here, neither through the other."""
