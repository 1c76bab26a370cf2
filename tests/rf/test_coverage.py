"""docs/rf_coverage.md is generated from scripts/rf_coverage.py's table and up to date; every dt.… counterpart
named there exists; with returnn installed, the table lists exactly rf's public names."""
import pytest

from repo_scripts import load_script


def _coverage():
    return load_script("scripts/rf_coverage.py")


def test_table_is_consistent_and_doc_up_to_date():
    cov = _coverage()
    assert cov.problems(check_rf=False) == []
    assert cov.DOC.read_text() == cov.render(), "docs/rf_coverage.md is stale: run python scripts/rf_coverage.py"


def test_table_lists_every_public_returnn_frontend_name():
    pytest.importorskip("returnn")
    cov = _coverage()
    assert cov.problems(check_rf=True) == []
