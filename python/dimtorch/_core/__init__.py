"""The ground floor of the Python package: what every op definition uses (argument checks and the dim
strings of messages, dtypes, error naming, tracing predicates, in-graph masks, per-dim caches, host
reads of data). Imports only dimtorch._C."""
