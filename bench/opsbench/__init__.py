"""The overhead benchmark's parts: shape sets and data, the rows table, timing, agreement, reports."""
