"""The demo: a Conformer with CTC trained on an in-process sequence task (see demo/README.md)."""
