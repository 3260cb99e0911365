"""``memstore reload`` runs under calmer collector settings and gives them back."""

from __future__ import annotations

import gc

import pytest

from memstore.operations import BULK_GC_THRESHOLD, bulk_collection


def test_the_collector_settings_come_back_after_a_bulk_run() -> None:
    before = gc.get_threshold()
    assert gc.get_freeze_count() == 0
    with bulk_collection():
        assert gc.get_threshold() == (BULK_GC_THRESHOLD, *before[1:])
        assert gc.get_freeze_count() > 0
    assert gc.get_threshold() == before
    assert gc.get_freeze_count() == 0


def test_the_settings_come_back_when_the_run_fails() -> None:
    before = gc.get_threshold()
    with pytest.raises(KeyboardInterrupt), bulk_collection():
        raise KeyboardInterrupt
    assert gc.get_threshold() == before and gc.get_freeze_count() == 0


def test_a_freeze_made_before_stays() -> None:
    gc.freeze()
    try:
        frozen = gc.get_freeze_count()
        with bulk_collection():
            pass
        assert gc.get_freeze_count() == frozen
    finally:
        gc.unfreeze()
