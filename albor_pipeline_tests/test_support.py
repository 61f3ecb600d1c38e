"""The suite's own helpers that carry a contract: a scenario's failure names its stage."""

from __future__ import annotations

import pytest

from albor_pipeline_tests.support import stage


def test_a_failing_assertion_in_a_stage_group_names_the_stage() -> None:
    with pytest.raises(AssertionError, match=r"^\[corpus/train\] sequences") as failed, stage("corpus/train"):
        raise AssertionError("sequences 0 > 1000")
    assert isinstance(failed.value.__cause__, AssertionError)
    with stage("mixed/train"):  # a passing group stays silent
        assert True
